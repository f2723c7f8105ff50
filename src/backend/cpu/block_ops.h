// The CPU backend's Ops for the blocks of model/blocks.h: float32 activations (Tensor), weights as
// bound in backend/cpu/weights.h, each sequence's state in host memory (model/state.h). The
// block-specific operations live with their math: kda.cpp, mla.cpp, moe.cpp.
#pragma once

#include <cmath>
#include <span>
#include <vector>

#include "backend/cpu/ops.h"
#include "parallel/ranks.h"

namespace k3::cpu {

// The logistic function in float: the KDA/MLA gates and the MoE router.
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

struct KdaBuffers {
  Tensor q_pre, k_pre, v_pre, f_low, f, b, g_low, g;  // projections (f → log decay, b → β in place)
  Tensor q, k, v;                                      // after the short conv, [T, P]
  Tensor y;                                            // gated-RMSNorm output, [T, P]
};

struct MlaBuffers {
  Tensor qa, qa_normed, q, kv, gate;
  Tensor o;  // attention output, [T, heads · d_v]
};

struct MlpBuffers {
  Tensor a;  // act(gate, up)
};

using Routing = std::vector<std::vector<Route>>;  // per token, its picks

// routed[c] += weight · y[c]: one expert's output added to a token's routed sum. The one-rank loop
// and expert parallelism (expert_parallel.cpp) both add through it, in ascending expert order, so
// their sums have the same bits.
inline void add_weighted_row(const float* y, float weight, float* routed, int64_t width) {
  for (int64_t c = 0; c < width; ++c) routed[c] += weight * y[c];
}

// routed[t] += Σ weight · expert(z[t]) over token t's picks whose expert `experts` binds (picks of a
// null expert are left to another device: hybrid CPU/GPU experts). One gated MLP per expert over its
// tokens' rows, experts in ascending order, each token's outputs added in that order.
void add_routed_experts(const ActivationConfig& act, const CpuHandles::Experts& experts, const Tensor& z,
                        const Routing& routing, Tensor& routed);

// Built in place (moe_buffers returns it as a prvalue): `routed` refers to `out`, or without a
// latent up-projection to the block's own sum.
struct MoeBuffers {
  MoeBuffers(const MoeWeights& w, const Tensor& x, Tensor& out);
  MoeBuffers(const MoeBuffers&) = delete;
  MoeBuffers& operator=(const MoeBuffers&) = delete;

  Tensor logits;
  Routing routing;
  Tensor z;         // latent down-projection of x
  Tensor own;       // the routed sum when it feeds the latent up-projection
  Tensor& routed;   // Σ weight · expert(z) per token, [T, latent or hidden], zero-initialised
  Tensor normed;    // RMSNorm of the routed sum (latent norm)
  Tensor shared;    // shared experts' output
};

class BlockOps {
 public:
  // ranks.experts: the ranks the routed experts are divided among, as ranks.placement says
  // (backend/cpu/expert_parallel.h); null: every expert here. ranks.routing_record counts the picks.
  BlockOps(const K3Config& config, std::span<const SeqSlice> slices, ParallelRanks ranks = {})
      : c_(config), slices_(slices), ranks_(ranks) {}

  struct Scope {};
  Scope scope() const { return {}; }
  void linear(const Linear& w, const Tensor& x, Tensor& y) const { cpu::linear(*w, x, y); }
  void norm(const Tensor& x, const Floats& w, double eps, Tensor& y) const { rms_norm(x, w, eps, y); }
  void add(Tensor& acc, const Tensor& x) const { cpu::add(acc, x); }
  bool present(const Floats& v) const { return !v.empty(); }

  KdaBuffers kda_buffers(const KdaWeights& w, const Tensor& x) const;
  void kda_short_conv(int64_t layer, const KdaWeights& w, KdaBuffers& s) const;
  void kda_attention(int64_t layer, const KdaWeights& w, KdaBuffers& s) const;

  MlaBuffers mla_buffers(const MlaWeights& w, const Tensor& x) const;
  void mla_append_cache(int64_t layer, const MlaWeights& w, MlaBuffers& s) const;
  void mla_attention(int64_t layer, const MlaWeights& w, MlaBuffers& s) const;

  MlpBuffers mlp_buffers(const MlpWeights&, const Tensor&) const { return {}; }
  void gated_projection(const Linear& gate, const Linear& up, const Tensor& x, Tensor& a) const {
    cpu::gated_projection(c_.activation, *gate, *up, x, a);
  }

  MoeBuffers moe_buffers(const MoeWeights& w, const Tensor& x, Tensor& out) const { return MoeBuffers(w, x, out); }
  void route(const Tensor& logits, const Floats& bias, Routing& routing) const;
  void routed_experts(int64_t layer, const MoeWeights& w, const Tensor& z, const Routing& routing, Tensor& routed) const;
  void complete_routed(Tensor&) const {}  // routed_experts leaves nothing pending

 private:
  const K3Config& c_;
  std::span<const SeqSlice> slices_;
  ParallelRanks ranks_;  // the expert ranks, their placement and the routing record are used here
};

}  // namespace k3::cpu
