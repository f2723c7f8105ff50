// The model's weights bound from the LoadPlan for the CPU backend: model/weight_tree.h's tree over
// CpuHandles. Every Linear / expert is a cpu::CpuLinear handle (its kernel chosen by scheme at load;
// its bytes a view into the mapped checkpoint or a host copy, CpuLinear::bytes_location), every
// vector a float32 array after the binding's transforms (A_log narrowed to num_heads, a storage
// layout's forms undone). Derived values are precomputed here: the AttnRes score vector c = norm ⊙ proj (spec §3.1)
// and the per-head MLA absorbed matrices (spec §5).
#pragma once

#include <memory>
#include <functional>
#include <vector>

#include "backend/cpu/cpu_linear.h"
#include "model/config.h"
#include "model/weight_tree.h"
#include "parallel/sharding.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/materialize.h"

namespace k3 {

// The CPU backend's handle traits for WeightTree.
struct CpuHandles {
  using Linear = std::unique_ptr<cpu::CpuLinear>;  // null when absent
  using Vector = std::vector<float>;               // empty when absent
  using Embedding = std::vector<float>;            // [vocab][hidden]
  struct KdaConv {
    Vector q, k, v;  // each [P][W]
  };
  // kv_b dequantised per head: w_uk [n_h][d_nope][r_kv], w_uv [n_h][d_v][r_kv] (split_kv_b).
  struct MlaAbsorbed {
    Vector w_uk, w_uv;
  };
  struct Experts {
    std::vector<Linear> w1, w3, w2;  // per expert: gate, up, down
  };
  struct ModelExtras {};
};

using Linear = CpuHandles::Linear;
using Floats = CpuHandles::Vector;
using KdaWeights = KdaTree<CpuHandles>;
using MlaWeights = MlaTree<CpuHandles>;
using MlpWeights = MlpTree<CpuHandles>;
using MoeWeights = MoeTree<CpuHandles>;
using LayerWeights = LayerTree<CpuHandles>;
using ModelWeights = WeightTree<CpuHandles>;

// kv_b [n_h·(d_nope + d_v), r_kv] split per head into the absorbed-form matrices (spec §5):
// w_uk [n_h][d_nope][r_kv] (each head's first d_nope rows) and w_uv [n_h][d_v][r_kv] (the rest).
void split_kv_b(const std::vector<float>& kv_b, const MlaConfig& m, std::vector<float>& w_uk, std::vector<float>& w_uv);

// Which routed experts of which layer a rank binds (an expert-parallel rank's share:
// expert_parallel.h); the others stay null. Empty: every expert.
using ExpertFilter = std::function<bool(int64_t layer, int64_t expert)>;

// Binds every parameter of a plan without problems. `files` must outlive the weights (kernels may
// keep views into mapped checkpoint bytes).
ModelWeights bind_weights(const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                          const cpu::LinearOptions& options = {}, const ExpertFilter& experts = {});

// Only the routed experts `experts` keeps, per model layer (empty banks for non-MoE layers): the CPU's
// share under hybrid CPU/GPU experts, without the rest of the model.
std::vector<CpuHandles::Experts> bind_routed_experts(const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                                                     const cpu::LinearOptions& options, const ExpertFilter& experts);

// A tree over the same weight bytes as `whole` (every linear a CpuLinear::rows_view of all its rows,
// sharing the bound matrices, which stay alive while a view does; vectors copied), with only the
// routed experts `experts` keeps: how in-process ranks share one binding.
ModelWeights view_weights(const ModelWeights& whole, const ExpertFilter& experts = {});

}  // namespace k3
