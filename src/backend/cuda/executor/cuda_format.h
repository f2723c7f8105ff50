// The CUDA backend's per-format entry: what each quantization scheme does on the GPU, so that the
// executor (device_weights.cpp, expert_packing.cpp, ffn_block.cpp, expert_stream.cpp) dispatches
// without naming formats. One entry per scheme of quant/formats/scheme_list.h, `cuda_format_<name>`,
// defined in the scheme's folder (src/quant/formats/<format>/cuda/); cuda_format() looks one up.
//   - linear: a dense linear kept in a GEMM form of its own (DeviceLinearForm); or, with
//     dense_as_bank, kept as a routed-expert bank of one expert (bank_linear.h) where its layout
//     allows (by default only with dense_bank_by_default); neither: the uploader dequantises it to bf16.
//   - absorbed_kv_b: an MLA kv_b kept packed for the absorbed decode's two products
//     (DeviceAbsorbedKvB); null: the uploader splits it into bf16 W_UK / W_UV.
//   - routed-expert banks kept packed for the format's grouped GEMM: expert_layout says whether a
//     bank can be (and in which layout: two banks stack only in equal layouts), upload_experts makes
//     the DeviceExpertBank, which runs the GEMM and lists its arrays for expert streaming. Null:
//     the bank is dequantised to bf16.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/tensor.h"
#include "backend/cuda/executor/device_weights.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/ops/ops.h"
#include "parallel/sharding.h"
#include "quant/formats/scheme_list.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/materialize.h"

namespace k3::cuda {

struct StepContext;

// One array of a stacked bank: expert e's bytes are base + e · per_expert, per_expert apart.
struct BankArray {
  void* base = nullptr;
  size_t per_expert = 0;
};
// The array of `total` bytes over `experts` (> 0) experts.
inline BankArray bank_array(void* base, uint64_t total, int64_t experts) {
  return {base, static_cast<size_t>(static_cast<int64_t>(total) / experts)};
}

// Where an expert GEMM's input comes from: sorted rows (GEMM 1's gathered rows), or GEMM 1's gate
// and up halves under the gated activation, which is then applied by the kernel that forms the
// bank's input — for a quantised activation contract the activation and GEMM 2's input quantisation
// are one pass (moe_quantize_*_activation: bit for bit the two kernels they replace).
struct ExpertInput {
  DeviceTensor rows;  // the rows; with act: where their bf16 form goes if the bank multiplies bf16 rows
  const GatedActivation* act = nullptr;
  DeviceTensor gate, up;

  static ExpertInput of_rows(const DeviceTensor& rows) { return {rows, nullptr, {}, {}}; }
  static ExpertInput activated(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                               const DeviceTensor& bf16_rows) {
    return {bf16_rows, &act, gate, up};
  }
};

// The input as bf16 rows (what the bf16 kernels multiply): runs the activation first where there is
// one; f32 rows (a dense linear's input, bank_linear.h) are rounded into step scratch.
DeviceTensor bf16_rows(StepContext& ctx, const ExpertInput& in);

// A routed-expert bank kept in its format's packed layout, stacked per expert (rows e·N … of expert
// e). Made by the format's upload_experts; the executor only calls these.
class DeviceExpertBank {
 public:
  explicit DeviceExpertBank(SchemeKind scheme) : scheme_(scheme) {}
  virtual ~DeviceExpertBank() = default;
  SchemeKind scheme() const { return scheme_; }
  // ys [R, N] (f32 or bf16) = the input's rows × each row's expert, in the kernels the format chooses for the
  // dispatch (its choice E); the kernels run on ctx.stream, scratch from ctx.
  virtual void gemm(StepContext& ctx, const ExpertInput& in, const MoeDispatch& d, const DeviceTensor& ys) const = 0;
  // The bank's arrays for `experts` (> 0) experts (expert streaming copies them per expert).
  virtual std::vector<BankArray> arrays(int64_t experts) const = 0;
  // A bank of the same form (layout, N, K, parts) for `experts` experts, from the arena; this bank
  // holds `like_experts`. Reads only this bank's shape (its device memory may be given back).
  virtual std::shared_ptr<const DeviceExpertBank> alloc_like(Arena& arena, int64_t like_experts, int64_t experts,
                                                             const char* what) const = 0;

 private:
  SchemeKind scheme_;
};

// A dense linear in its format's GEMM form (DeviceLinear::Kind::kPacked).
class DeviceLinearForm {
 public:
  virtual ~DeviceLinearForm() = default;
  // y = x·Wᵀ on ctx.stream: x bf16 or f32 [rows, k], y bf16 [rows, n] — or f32 where writes_f32
  // (else StepContext::linear widens an f32 output); scratch from ctx.arena, given back by the caller.
  virtual void gemm(StepContext& ctx, const DeviceTensor& x, const DeviceTensor& y) const = 0;
  virtual bool writes_f32() const { return false; }
};

// The absorbed MLA decode's two products (backend/cuda/attention/mla/mla.h mla_absorb_q /
// mla_unabsorb_o, same operand forms) over a kv_b its format keeps packed.
class DeviceAbsorbedKvB {
 public:
  virtual ~DeviceAbsorbedKvB() = default;
  virtual void absorb_q(const DeviceTensor& q, const DeviceTensor& q_abs, cudaStream_t stream) const = 0;
  virtual void unabsorb_o(const DeviceTensor& o_lat, const DeviceTensor& gate, const DeviceTensor& out,
                          cudaStream_t stream) const = 0;
};

// What a format's uploader works with: the plan's parameters, their files, the arena the weights go
// into; `bytes` sums the device bytes allocated.
struct UploadContext {
  Arena& arena;
  const LoadPlan& plan;
  PlanFiles& files;
  uint64_t& bytes;
  bool w4a4 = false;  // UploadOptions::w4a4

  // v as a device f32 vector (counted in bytes).
  DeviceVector upload(const std::vector<float>& v, const std::string& name);
  // One device f32 scalar (counted in bytes).
  float* scalar(float value, const std::string& name);
};

// The banks [first ; second] of one routed-expert bank: plan parameters i1 ([E, n1, K]) and i2
// ([E, n2, K]; n2 = 0: no second), stacked per expert as rows e·(n1 + n2) ….
struct ExpertBankSource {
  std::string name;  // the first parameter's
  size_t i1 = 0, i2 = 0;
  int64_t n1 = 0, n2 = 0, experts = 0, k = 0;
  // A dense linear's head share (bank_linear.h; one part, one expert): the n1 rows taken start at
  // row0 of a source of source_rows rows. 0, 0: each part's source holds exactly its rows.
  int64_t row0 = 0, source_rows = 0;
  int64_t rows_in_source(int64_t part_rows) const { return source_rows > 0 ? source_rows : part_rows; }
};

struct CudaFormat {
  // Sets w to the format's GEMM form of rows [rows.first, rows.end()) of plan parameter i (w.n =
  // rows.count and w.k set; all rows but under attention tensor parallelism); false: bf16.
  bool (*linear)(UploadContext& up, size_t i, const std::string& name, IndexRange rows, DeviceLinear& w) = nullptr;
  // Routed-expert bank packing: only with CudaOptions::packed_int_experts when set.
  bool needs_packed_int = false;
  // The layout a bank of `experts` × [n, k] (one source tensor per expert) stays packed in, or nullopt.
  std::optional<int64_t> (*expert_layout)(const Binding& b, int64_t experts, int64_t n, int64_t k,
                                          PlanFiles& files) = nullptr;
  // The bank uploaded in `layout` (what expert_layout gave both parameters).
  std::shared_ptr<const DeviceExpertBank> (*upload_experts)(UploadContext& up, const ExpertBankSource& src,
                                                            int64_t layout) = nullptr;
  // Plan parameter i, an MLA kv_b [H·(d_nope + d_v), r] of the Kimi geometry (mla_fast_geometry), kept
  // packed for the absorbed decode.
  std::shared_ptr<const DeviceAbsorbedKvB> (*absorbed_kv_b)(UploadContext& up, size_t i, const std::string& name,
                                                            const MlaConfig& m) = nullptr;
  // A dense linear without a `linear` form becomes a bank of one expert (expert_layout with E = 1,
  // upload_experts) run by the bank's grouped GEMM (bank_linear.h).
  bool dense_as_bank = false;
  // ... and does so under DenseLinears::kAuto: where the Kimi-K3 family bench measured the bank form
  // at least as fast as bf16 at decode and prefill (docs/performance.md "Dense linears").
  bool dense_bank_by_default = false;
};

#define K3_CUDA_FORMAT_DECLARE(Kind, name) extern const CudaFormat cuda_format_##name;
K3_SCHEME_LIST(K3_CUDA_FORMAT_DECLARE)
#undef K3_CUDA_FORMAT_DECLARE

// The entry of a scheme (cuda_format.cpp's table from K3_SCHEME_LIST).
const CudaFormat& cuda_format(SchemeKind kind);

}  // namespace k3::cuda
