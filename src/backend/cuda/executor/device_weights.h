// The model's weights on the GPU: model/weight_tree.h's tree over DeviceHandles, uploaded once from
// the LoadPlan into the arena in the layouts the CUDA kernels read. Per scheme (docs/cuda-backend.md "Device weights"):
//   a linear whose scheme has a GEMM form (cuda_format.h CudaFormat::linear) → that form
//   a linear whose scheme runs dense linears as a bank of one expert (CudaFormat::dense_as_bank,
//                        bank_linear.h) → that bank, where its layout allows
//   every other linear → bf16 (BF16 copied as stored, the rest dequantised through its exact
//                        reference; cuBLASLt BF16 GEMM)
// Routed experts are stacked per bank, w1 and w3 interleaved per expert as [w1_e ; w3_e] so one
// grouped GEMM yields [gate | up]: kept packed where the scheme's entry packs them
// (CudaFormat::upload_experts → DeviceExpertBank), else bf16 [E·N, K].
// Vectors (norms, conv, A_log, dt_bias, AttnRes score vectors) are f32.
// Host-only header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/tensor.h"
#include "backend/cuda/executor/dense_linears.h"
#include "model/config.h"
#include "model/routing_skew.h"
#include "model/weight_tree.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/materialize.h"

namespace k3::cuda {

class DeviceLinearForm;  // cuda_format.h

// One linear layer y = x·Wᵀ, W [n, k], in the form its GEMM wants (`kind`): bf16, or the GEMM form of
// its scheme (CudaFormat::linear → DeviceLinearForm); its bytes live in the device arena the weights
// were built in.
struct DeviceLinear {
  enum class Kind : uint8_t { kNone, kBf16, kPacked };
  Kind kind = Kind::kNone;
  int64_t n = 0, k = 0;
  DeviceTensor bf16;                              // kBf16
  std::shared_ptr<const DeviceLinearForm> packed;  // kPacked
  // Attention tensor parallelism (HeadShare): > 0 on an o_proj whose input arrives as this rank's
  // heads' values, groups of this many columns, that the ranks all-gather before the (whole) linear.
  int64_t gathered_input_unit = 0;

  explicit operator bool() const { return kind != Kind::kNone; }
};

using DeviceVector = const float*;  // f32 on the device; nullptr when absent

class DeviceAbsorbedKvB;  // cuda_format.h

struct DeviceMlaAbsorbed {
  DeviceTensor w_uk, w_uv;  // bf16 [H·d_nope, r] and [H·d_v, r] (mla.h's absorbed decode)
  // A kv_b its format keeps packed for the absorbed decode (CudaFormat::absorbed_kv_b) instead of
  // w_uk / w_uv; the expanded (prefill) path still multiplies kv_b dequantised. nullptr otherwise.
  std::shared_ptr<const DeviceAbsorbedKvB> packed;
};

class DeviceExpertBank;  // cuda_format.h

// A routed-expert bank, stacked per expert: bf16 rows, or kept packed in its checkpoint format for
// that format's grouped GEMM (the scheme's CudaFormat entry makes the DeviceExpertBank, which runs
// the GEMM; docs/cuda-backend.md "Device weights").
struct DeviceExperts {
  DeviceTensor bf16;                                   // not packed: [E·N, K]
  std::shared_ptr<const DeviceExpertBank> packed_bank;  // packed: the format's bank
  bool packed() const { return packed_bank != nullptr; }
};

// A MoE layer's routed experts as the grouped GEMMs read them.
struct DeviceExpertBanks {
  DeviceExperts w13;  // [E·2I, D]: per expert [w1 (I rows) ; w3 (I rows)]
  DeviceExperts w2;   // [E·D, I]
};

// The CUDA backend's handle traits for WeightTree: every handle points into the device arena.
struct DeviceHandles {
  using Linear = DeviceLinear;     // Kind::kNone when absent
  using Vector = DeviceVector;     // nullptr when absent
  using Embedding = DeviceTensor;  // bf16 [vocab, hidden]
  using KdaConv = DeviceVector;    // [3P][W]: q, k and v conv weights stacked (kda_short_conv's layout)
  using MlaAbsorbed = DeviceMlaAbsorbed;
  using Experts = DeviceExpertBanks;
  struct ModelExtras {
    uint64_t bytes = 0;  // device bytes of the weights that stay on the device (streamed banks excluded)
  };
};

using DeviceKda = KdaTree<DeviceHandles>;
using DeviceMla = MlaTree<DeviceHandles>;
using DeviceMlp = MlpTree<DeviceHandles>;
using DeviceMoe = MoeTree<DeviceHandles>;
using DeviceLayer = LayerTree<DeviceHandles>;
using DeviceWeights = WeightTree<DeviceHandles>;

// What a vector parameter is, for a filler that makes values instead of reading them.
enum class VectorRole : uint8_t { kNormWeight, kALog, kDtBias, kCorrectionBias };

// Where the members of DeviceWeights come from: build_weights walks the config once (which
// parameters each KDA / MLA / MoE / MLP block has) and asks a filler for each member by logical
// parameter name (model/parameters.h). upload_weights' filler reads a load plan; synthetic_weights'
// generates values on the GPU. Every call allocates its result in the arena and fills it; bytes()
// sums the device bytes allocated.
class WeightFiller {
 public:
  virtual ~WeightFiller() = default;

  virtual DeviceTensor embedding(const std::string& name) = 0;  // bf16 [vocab, hidden]
  virtual DeviceLinear linear(const std::string& name) = 0;     // in the GEMM form its scheme allows
  virtual DeviceLinear bf16_linear(const std::string& name) = 0;  // bf16 whatever its scheme
  // Banks [E, N₁, K] and [E, N₂, K] stacked per expert as [E·(N₁+N₂), K]: rows e·(N₁+N₂) … are
  // [first_e ; second_e]. `second` may be empty (one bank).
  virtual DeviceExperts experts(const std::string& first, const std::string& second) = 0;
  virtual DeviceVector vector(const std::string& name, VectorRole role) = 0;
  virtual DeviceVector zeros(int64_t n, const std::string& what) = 0;
  // The AttnRes score vector c = {prefix}_norm.weight ⊙ {prefix}_proj.weight[0] (spec §3.1).
  virtual DeviceVector res_score(const std::string& prefix) = 0;
  // The q, k and v conv weights of the KDA layer whose parameters start with `prefix`, stacked [3P][W].
  virtual DeviceVector kda_conv(const std::string& prefix) = 0;
  // Sets w.absorbed from kv_b [H·(d_nope + d_v), r] (`name`, already in w.kv_b): w_uk and w_uv split
  // per head, or the kv_b kept packed by its format (CudaFormat::absorbed_kv_b).
  virtual void absorb_kv_b(const std::string& name, const MlaConfig& m, DeviceMla& w) = 0;

  uint64_t bytes() const { return bytes_; }

 protected:
  uint64_t bytes_ = 0;
};

// Expert streaming (expert_stream.h): takes each routed-expert bank of MoE layer `layer` (role 0 =
// w13, 1 = w2) right after the filler made it on the device, and returns the device bytes it held;
// build_weights then gives the bank's memory back to the arena and leaves only its form in
// DeviceMoe::experts (the bank object, for its kind; its device memory is not read).
class ExpertBankSink {
 public:
  virtual ~ExpertBankSink() = default;
  virtual uint64_t keep(int64_t layer, int role, const DeviceExperts& bank) = 0;
};

// Every member the config implies, each from the filler. With a sink (and the filler's arena), the
// routed-expert banks go to it instead of staying on the device: the arena must hold one bank at a
// time.
DeviceWeights build_weights(WeightFiller& filler, const K3Config& config, Arena* arena = nullptr,
                            ExpertBankSink* sink = nullptr);

// Which weights keep their checkpoint's packed form (CudaOptions' packing fields).
struct UploadOptions {
  bool packed_int = true;      // formats with CudaFormat::needs_packed_int packed (CudaOptions::packed_int_experts)
  bool w4a4 = false;           // banks with an activation contract take their input_scale (CudaOptions::w4a4)
  DenseLinears dense_linears = DenseLinears::kAuto;  // CudaOptions::dense_linears
};
// Attention tensor parallelism: rank `rank` of `ranks` holds split_range of the KDA and MLA heads
// (`kda_heads`, `mla_heads`: the whole model's). The parameters parallel/sharding.h divides by head
// are uploaded as this rank's rows (or vector entries) — kept in their GEMM form where the rows
// split on its blocks, else bf16 —; o_proj stays whole and takes its input all-gathered
// (DeviceLinear::gathered_input_unit); everything else is whole on every rank.
struct HeadShare {
  int64_t rank = 0, ranks = 1;
  int64_t kda_heads = 0, mla_heads = 0;
};
// Uploads every parameter of an ok plan for `config` (with a HeadShare: the config of this rank's
// heads, cpu::tensor_parallel_config). Throws k3::Error naming the parameter on any problem.
DeviceWeights upload_weights(Arena& arena, const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                             const UploadOptions& options, ExpertBankSink* sink = nullptr,
                             const HeadShare& heads = {});

// Every parameter the config implies, generated on the GPU (no host copies) in the bf16 form above:
// matrices uniform with variance 1/K (activations keep their scale through the layers), norm weights
// 1, conv weights, A_log, dt_bias and the correction bias small, so the forward stays finite and
// routing spreads tokens over the experts — evenly, or with `routing`'s skew through the correction
// bias (model/routing_skew.h; each MoE layer's popularity order a different permutation of its
// experts). Deterministic in `seed`. For benchmarks only.
DeviceWeights synthetic_weights(Arena& arena, const K3Config& config, uint64_t seed, ExpertBankSink* sink = nullptr,
                                const RoutingSkew& routing = {});

}  // namespace k3::cuda
