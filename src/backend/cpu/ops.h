// The CPU backend's block operations (fp32 math, OpenMP over tokens / heads), one file each:
// norm.cpp, kda.cpp, mla.cpp, moe.cpp. The mixers and FFNs are model/blocks.h over BlockOps
// (block_ops.h); CpuBackend (cpu_backend.cpp) exposes them as a Backend.
#pragma once

#include "backend/cpu/backend.h"
#include "parallel/ranks.h"

namespace k3::cpu {

// Elementwise loops below this size (and row loops over one row) run on the calling thread: at
// decode a fork/join — a wake-up under the passive wait policy — costs more than the work.
inline constexpr size_t kParallelMinElements = size_t{1} << 15;

void linear(const CpuLinear& w, const Tensor& x, Tensor& y);  // y resized to [x.rows, w.rows()]
// linear() without the weight's per-tensor α (CpuLinear::output_scale).
void linear_accumulators(const CpuLinear& w, const Tensor& x, Tensor& y);

// gate ← act(gate·gate_alpha, up·up_alpha) elementwise: SiLU(g)·u, or SiTU(β, β_lin) (spec §2.1).
void gated_activation(const ActivationConfig& act, Tensor& gate, const Tensor& up, float gate_alpha, float up_alpha);
// a = act(x·gateᵀ, x·upᵀ) under the MoE scale contract: both GEMMs' α applied before act, once (moe.cpp).
void gated_projection(const ActivationConfig& act, const CpuLinear& gate_w, const CpuLinear& up_w, const Tensor& x,
                      Tensor& a);
// One gated FFN (dense MLP, shared or routed expert) under the MoE scale contract (moe.cpp).
void gated_mlp(const ActivationConfig& act, const CpuLinear& gate_w, const CpuLinear& up_w, const CpuLinear& down_w,
               const Tensor& x, Tensor& out);

void add(Tensor& acc, const Tensor& x);  // acc += x
void rms_norm(const Tensor& x, const Floats& w, double eps, Tensor& y);
void attn_res_mix_norm(std::span<const Tensor* const> candidates, const Floats& c, const Floats& norm_w, double eps,
                       Tensor& y);

void kda_mixer(const K3Config& config, int64_t layer, const KdaWeights& w, const Tensor& x,
               std::span<const SeqSlice> slices, Tensor& out);
void mla_mixer(const K3Config& config, int64_t layer, const MlaWeights& w, const Tensor& x,
               std::span<const SeqSlice> slices, Tensor& out);

// Router for one token (spec §7.1): fp32 scores (sigmoid or softmax), correction bias for the
// selection only, grouped top-k, renormalisation, routed scaling. Ties in the selection score go
// to the lower expert index.
struct Route {
  int64_t expert;
  float weight;
};
std::vector<Route> route(const MoeConfig& m, const float* logits, const Floats& bias);

// MoE layer `layer`. ranks.experts: the ranks the routed experts are divided among, as
// ranks.placement says (expert_parallel.h); null: all here. ranks.routing_record counts the picks.
void moe(const K3Config& config, int64_t layer, const MoeWeights& w, const Tensor& x, Tensor& out,
         const ParallelRanks& ranks = {});
void mlp(const K3Config& config, const MlpWeights& w, const Tensor& x, Tensor& out);

}  // namespace k3::cpu
