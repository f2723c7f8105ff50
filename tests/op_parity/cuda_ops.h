// The CUDA target's entry points, in host types only: the cases (linear_cases.cpp, pointwise_cases.cpp,
// block_cases.cpp) call them from their `run` when the target is TargetKind::Cuda, so no case file
// sees a CUDA header. The implementation (tests/op_parity/cuda/) is compiled only when k3 is built
// with K3_CUDA and registers itself at start-up; without it cuda_ops() is null and there is no cuda
// target. Every function uploads its operands, runs the CUDA backend's kernel(s) for the op on one
// stream, waits and returns the output as float.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/plan_files.h"

namespace k3::op_parity {

class CudaOps {
 public:
  virtual ~CudaOps() = default;

  // The device the target runs on ("NVIDIA H200"), or empty when no device is present at run time.
  virtual std::string device() const = 0;

  // y = x·Wᵀ with W parameter `index` of the plan (expert `expert` of a bank, or −1) uploaded as the
  // CUDA backend uploads a linear of its scheme (cuda_linear_form) and x f32 [m, k] on the host.
  // `kernel` receives the GEMM's name.
  virtual std::vector<float> linear(const LoadPlan& plan, PlanFiles& files, size_t index, int64_t expert,
                                    const std::vector<float>& x, int64_t m, std::string* kernel) = 0;

  // The pointwise kernels of backend/cuda/ops/ops.h on f32 rows [rows, cols].
  virtual std::vector<float> rms_norm(const std::vector<float>& x, int64_t rows, int64_t cols,
                                      const std::vector<float>& w, double eps) = 0;
  virtual std::vector<float> attn_res_mix_norm(const std::vector<std::vector<float>>& candidates, int64_t rows,
                                               int64_t cols, const std::vector<float>& score,
                                               const std::vector<float>& w, double eps) = 0;
  virtual std::vector<float> gated_activation(const ActivationConfig& act, const std::vector<float>& gate,
                                              const std::vector<float>& up, int64_t rows, int64_t cols,
                                              float gate_alpha, float up_alpha) = 0;
  // [expert, weight] per choice and token, as reference::route lays them out.
  virtual std::vector<float> route(const MoeConfig& m, const std::vector<float>& logits, int64_t rows,
                                   const std::vector<float>& bias) = 0;

  // A block of layer `layer` of a checkpoint (op "kda", "mla", "moe" or "mlp") on rows x [rows,
  // hidden]: mixers run rows [0, prefill) as one prefill step of one sequence from an empty state,
  // then each further row as a decode step; feed-forward blocks run all rows at once (prefill
  // ignored). Output f32 [rows, hidden].
  virtual std::vector<float> block(const std::string& op, const K3Config& config, const LoadPlan& plan,
                                   PlanFiles& files, int64_t layer, const std::vector<float>& x, int64_t rows,
                                   int64_t prefill) = 0;
};

// The registered CUDA ops, or nullptr (no CUDA in this build).
CudaOps* cuda_ops();
// Called once by the CUDA implementation's static registrar.
void register_cuda_ops(std::unique_ptr<CudaOps> ops);

// ---- what the CUDA target runs, decided on the host (also without CUDA, for --list) ----------
// How the CUDA backend multiplies a linear of this binding (backend/cuda/executor/device_weights.h):
// FP8 128×128 block → FP8_PB_WO GEMM; FP8 per tensor with an input_scale → static-scale FP8 GEMM
// (both only for N, K multiples of 16, cuBLASLt's FP8 requirement); every other scheme → dequantised
// to bf16, bf16 GEMM. Routed-expert banks of NVFP4 / MXFP4 / ModelSlim W4A8 / GGUF schemes stay
// packed for the expert kernels instead (the moe op covers those).
enum class CudaLinearForm { kBf16, kFp8Block, kFp8Tensor, kPackedExperts };
CudaLinearForm cuda_linear_form(const Binding& b, int64_t n, int64_t k, bool bank);
const char* cuda_linear_form_name(CudaLinearForm f);
// Why the CUDA target cannot run this linear ("" when it can).
std::string cuda_linear_unsupported(const Scheme& scheme, int64_t k, bool bank);

// The vector kernels' requirement (ops.h): rows of a multiple of 8 values.
std::string cuda_width_unsupported(int64_t cols);

}  // namespace k3::op_parity
