// CPU linear layers: each bound weight [N, K] is converted at load into the layout its CPU kernel
// wants (the LoadPlan stays the single source of truth; this is a derived form). The forward pass
// only sees CpuLinear; which kernel runs is decided once, here, by the scheme's CPU binding
// (cpu_format.h) and the CPU features.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/parameters.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/materialize.h"

namespace k3::cpu {

// Activation numerics of quantized schemes. WeightOnly (default): activations stay float, as Hopper
// engines run the 4-bit formats. CheckpointContract: the activation quantisation a checkpoint
// declares, where its format's CPU binding implements one (the format's cpu/ folder documents it;
// quant-formats spec), as the CUDA backend computes it.
enum class ActivationNumerics {
  WeightOnly,          // float activations into every weight format (the default)
  CheckpointContract,  // the checkpoint's activation quantisation, where its format has one
  Bf16Inputs,          // every linear's input rounded to bf16 first (RNE), as the CUDA backend's GEMMs
                       // take it: reproduces the GPU's rounding of GEMM inputs on the CPU
};

// Sees every linear's input before the linear runs (calibration of static activation scales, k3
// quantize --calib): the parameter, the expert (−1 when not a bank) and the input rows [m, k], as the
// forward pass hands them over (float, before any activation quantisation). Called on the thread
// that runs the forward, never from inside a parallel region.
class LinearInputObserver {
 public:
  virtual ~LinearInputObserver() = default;
  virtual void observe(const std::string& param, int64_t expert, const float* x, int64_t m, int64_t k) = 0;
};

struct LinearOptions {
  ActivationNumerics activation = ActivationNumerics::WeightOnly;
  // When set, every linear is wrapped to report its input first; when null (the default) nothing is
  // wrapped and nothing is paid.
  std::shared_ptr<LinearInputObserver> observer = nullptr;
};

// Where a CpuLinear's weight bytes live.
enum class WeightBytes : uint8_t {
  kHostCopy,    // owned host memory: repacked or dequantised at load, or made in memory
  kMappedView,  // read in place from the mapped checkpoint, which the handle keeps alive
};

class CpuLinear {
 public:
  virtual ~CpuLinear() = default;
  int64_t rows() const { return rows_; }  // N (output features)
  int64_t cols() const { return cols_; }  // K (input features)

  // y[m][n] = Σ_k x[m][k] · W[n][k]; x is [M, K], y is [M, N], both float row-major. Multi-threaded
  // inside (OpenMP); reads each weight byte once per call.
  virtual void forward(const float* x, int64_t m, float* y) const = 0;
  // forward() without the per-tensor factor α = output_scale() (a format's global weight scale [×
  // its static activation scale under an activation contract]; 1 elsewhere): the MoE applies
  // GEMM1's α itself, before its activation.
  virtual void forward_accumulators(const float* x, int64_t m, float* y) const = 0;
  virtual float output_scale() const = 0;
  // Bytes of weight read by one forward() (for bandwidth rooflines).
  virtual uint64_t weight_bytes() const = 0;
  virtual std::string kernel_name() const = 0;
  // Rows [first, first + count) as a linear of their own (tensor parallelism's row splits): the same
  // kernel over the same bytes, shared with this one, each output row computed as this linear
  // computes it (dot_rows and decode_rows take absolute rows), so its values have the same bits.
  virtual std::unique_ptr<CpuLinear> rows_view(int64_t first, int64_t count) const = 0;

  // The scheme the weight was bound from (Dense for float weights made in memory) and where its
  // bytes live; make_cpu_linear records both.
  SchemeKind scheme() const { return scheme_; }
  WeightBytes bytes_location() const { return bytes_location_; }
  void set_origin(SchemeKind scheme, WeightBytes bytes) {
    scheme_ = scheme;
    bytes_location_ = bytes;
  }

 protected:
  CpuLinear(int64_t rows, int64_t cols) : rows_(rows), cols_(cols) {}

 private:
  int64_t rows_, cols_;
  SchemeKind scheme_ = SchemeKind::Dense;
  WeightBytes bytes_location_ = WeightBytes::kHostCopy;
};

// The CPU form of a bound Linear parameter, or of expert `expert` of an ExpertBank.
std::unique_ptr<CpuLinear> make_cpu_linear(const Binding& binding, const ParamSpec& spec, PlanFiles& files,
                                           int64_t expert = -1, const LinearOptions& options = {});

// A float32 weight already in memory (tests, dequantised fallbacks).
std::unique_ptr<CpuLinear> make_f32_linear(std::vector<float> weight, int64_t rows, int64_t cols);

// The driver around any WeightMatrix (backend/cpu/kernels/weight_matrix.h): prepares the
// activations once, then splits rows over OpenMP threads; up to kFusedMaxTokens tokens run the
// fused dot_rows kernels (each weight byte read once for all of them). More tokens: kernels with
// integer activations keep dot_rows over cache-sized row blocks; float ones decode tiles of rows to
// float32 once and multiply them with every token (docs/cpu-kernels.md, "Many tokens").
class WeightMatrix;
inline constexpr int64_t kFusedMaxTokens = 4;

// Which of the two paths a linear call takes. kByTokens (the default) picks by the token count as
// above; for integer-activation kernels both paths are dot_rows. A forward call that must give every
// row the same numerics whatever the batch holds (backend/cpu/forward.h: decode calls fused, prefill
// calls tiled) forces one: both paths compute each token's row independently of the other tokens, so
// a forced path is batch invariant.
enum class LinearPath { kByTokens, kFused, kTiles };
// Sets the path of the linear calls made on this thread for its lifetime, then restores the previous
// one. The OpenMP workers a linear call forks never read it; a caller that runs linears on its own
// workers (the MoE's experts across threads) sets the same path on each of them.
class ScopedLinearPath {
 public:
  explicit ScopedLinearPath(LinearPath path);
  ~ScopedLinearPath();
  ScopedLinearPath(const ScopedLinearPath&) = delete;
  ScopedLinearPath& operator=(const ScopedLinearPath&) = delete;

 private:
  LinearPath previous_;
};
LinearPath current_linear_path();
std::unique_ptr<CpuLinear> make_kernel_linear(std::unique_ptr<WeightMatrix> matrix);

}  // namespace k3::cpu
