// Feed-forward blocks (spec §7, §8): dense gated MLP and the MoE layer — fp32 router (sigmoid or
// softmax), correction bias for selection only, grouped top-k, renormalisation, routed scaling;
// latent down / norm / up; SiLU or SiTU experts; shared experts on the full-width input.
//
// Scale contract (quant-formats §3.4, DESIGN.md traps), explicit in gated_projection: the gate and up GEMMs
// return accumulators without their per-tensor α (a format's global weight scale [× its static
// activation scale under an activation contract]), gated_activation applies α_gate and α_up to them
// BEFORE SiTU's tanh — exactly once — and GEMM2 then requantises its input (under an activation
// contract) and applies its own α inside `linear`.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/block_ops.h"
#include "backend/cpu/expert_parallel.h"
#include "model/blocks.h"

namespace k3::cpu {

void gated_activation(const ActivationConfig& a, Tensor& gate, const Tensor& up, float gate_alpha, float up_alpha) {
  const float beta = static_cast<float>(a.situ_beta);
  const bool situ = a.kind == Activation::kSitu, cap_up = situ && a.situ_linear_beta.has_value();
  const float beta_lin = cap_up ? static_cast<float>(*a.situ_linear_beta) : 0.0f;
#pragma omp parallel for schedule(static) if (gate.data.size() >= kParallelMinElements)
  for (int64_t i = 0; i < static_cast<int64_t>(gate.data.size()); ++i) {
    const float g = gate.data[i] * gate_alpha, u = up.data[i] * up_alpha;
    if (!situ) {
      gate.data[i] = g * sigmoid(g) * u;
    } else {
      const float up_capped = cap_up ? beta_lin * std::tanh(u / beta_lin) : u;
      gate.data[i] = beta * std::tanh(g / beta) * sigmoid(g) * up_capped;
    }
  }
}

void gated_projection(const ActivationConfig& act, const CpuLinear& gate_w, const CpuLinear& up_w, const Tensor& x,
                      Tensor& a) {
  Tensor up;
  linear_accumulators(gate_w, x, a);
  linear_accumulators(up_w, x, up);
  gated_activation(act, a, up, gate_w.output_scale(), up_w.output_scale());
}

void gated_mlp(const ActivationConfig& act, const CpuLinear& gate_w, const CpuLinear& up_w, const CpuLinear& down_w,
               const Tensor& x, Tensor& out) {
  Tensor a;
  gated_projection(act, gate_w, up_w, x, a);
  linear(down_w, a, out);
}

std::vector<Route> route(const MoeConfig& m, const float* logits, const Floats& bias) {
  const int64_t E = m.num_experts;
  std::vector<float> s(static_cast<size_t>(E)), choice(static_cast<size_t>(E));
  if (m.scoring == RouterScoring::kSigmoid) {
    for (int64_t e = 0; e < E; ++e) s[e] = sigmoid(logits[e]);
  } else {
    const float mx = *std::max_element(logits, logits + E);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (s[e] = std::exp(logits[e] - mx));
    for (float& v : s) v /= sum;
  }
  for (int64_t e = 0; e < E; ++e) choice[e] = s[e] + bias[e];
  const int64_t groups = m.use_grouped_topk ? m.num_expert_group : 1;
  if (groups > 1 && m.topk_group < groups) {
    // A group's score is the sum of its two best choice values; keep the best topk_group groups.
    const int64_t per = E / groups;
    std::vector<std::pair<float, int64_t>> gscore;
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<float> members(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::partial_sort(members.begin(), members.begin() + std::min<int64_t>(2, per), members.end(), std::greater<>());
      gscore.push_back({members[0] + (per > 1 ? members[1] : 0.0f), g});
    }
    std::stable_sort(gscore.begin(), gscore.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<bool> keep(static_cast<size_t>(groups), false);
    for (int64_t i = 0; i < m.topk_group; ++i) keep[gscore[i].second] = true;
    for (int64_t e = 0; e < E; ++e) {
      if (!keep[e / per]) choice[e] = -INFINITY;
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return choice[a] > choice[b]; });
  std::vector<Route> picked;
  float total = 0;
  for (int64_t i = 0; i < m.experts_per_token; ++i) {
    picked.push_back({order[i], s[order[i]]});
    total += s[order[i]];
  }
  for (Route& r : picked) {
    if (m.renormalize) r.weight /= total + 1e-20f;
    r.weight *= static_cast<float>(m.routed_scaling_factor);
  }
  return picked;
}

MoeBuffers::MoeBuffers(const MoeWeights& w, const Tensor& x, Tensor& out)
    : routed(w.latent_up ? own : out) {
  routed = Tensor(x.rows, w.latent_down ? w.latent_down->rows() : x.cols);
}

void BlockOps::route(const Tensor& logits, const Floats& bias, Routing& routing) const {
  routing.resize(static_cast<size_t>(logits.rows));
  for (int64_t t = 0; t < logits.rows; ++t) routing[static_cast<size_t>(t)] = cpu::route(*c_.moe, logits.row(t), bias);
}

void BlockOps::routed_experts(int64_t layer, const MoeWeights& w, const Tensor& z, const Routing& routing, Tensor& routed) const {
  if (ranks_.routing_record) {
    for (const std::vector<Route>& picks : routing) {
      for (const Route& r : picks) ranks_.routing_record->add(layer, r.expert);
    }
  }
  if (ranks_.experts && ranks_.experts->size() > 1) {
    const ExpertPlacement contiguous(c_.moe->num_experts, ranks_.experts->size());
    return routed_experts_across(c_, layer, w, z, routing, routed, *ranks_.experts, ranks_.placement ? *ranks_.placement : contiguous);
  }
  add_routed_experts(c_.activation, w.experts, z, routing, routed);
}

void add_routed_experts(const ActivationConfig& act, const CpuHandles::Experts& experts, const Tensor& z,
                        const Routing& routing, Tensor& routed) {
  // Tokens per expert, with their routing weights.
  std::vector<std::vector<std::pair<int64_t, float>>> assigned(experts.w1.size());
  for (size_t t = 0; t < routing.size(); ++t) {
    for (const Route& r : routing[t]) {
      if (experts.w1[static_cast<size_t>(r.expert)]) assigned[static_cast<size_t>(r.expert)].push_back({static_cast<int64_t>(t), r.weight});
    }
  }
  std::vector<size_t> active;
  for (size_t e = 0; e < assigned.size(); ++e) {
    if (!assigned[e].empty()) active.push_back(e);
  }
  std::vector<Tensor> outputs(active.size());
  const auto run_expert = [&](size_t i) {
    const size_t e = active[i];
    const auto& tokens = assigned[e];
    Tensor in(static_cast<int64_t>(tokens.size()), z.cols);
    for (size_t j = 0; j < tokens.size(); ++j) std::copy_n(z.row(tokens[j].first), z.cols, in.row(static_cast<int64_t>(j)));
    gated_mlp(act, *experts.w1[e], *experts.w3[e], *experts.w2[e], in, outputs[i]);
  };
  // With at least as many experts as threads, each thread runs whole experts (their linears then run
  // on that thread alone: no fork/join per linear); else each expert's linears split their rows over
  // the threads. Every row is computed the same way on either path, and the sums are added below in
  // ascending expert order, so the result does not depend on the path.
  const int64_t count = static_cast<int64_t>(active.size());
  if (count >= omp_get_max_threads() && count > 1 && !omp_in_parallel()) {
    const LinearPath path = current_linear_path();  // the caller's; each worker takes it over
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < count; ++i) {
      const ScopedLinearPath same_path(path);
      run_expert(static_cast<size_t>(i));
    }
  } else {
    for (int64_t i = 0; i < count; ++i) run_expert(static_cast<size_t>(i));
  }
  for (size_t i = 0; i < active.size(); ++i) {
    const auto& tokens = assigned[active[i]];
    for (size_t j = 0; j < tokens.size(); ++j) {
      add_weighted_row(outputs[i].row(static_cast<int64_t>(j)), tokens[j].second, routed.row(tokens[j].first), z.cols);
    }
  }
}

void mlp(const K3Config& config, const MlpWeights& w, const Tensor& x, Tensor& out) {
  BlockOps ops(config, {});
  mlp_block(ops, w, x, out);
}

void moe(const K3Config& config, int64_t layer, const MoeWeights& w, const Tensor& x, Tensor& out, const ParallelRanks& ranks) {
  BlockOps ops(config, {}, ranks);
  moe_block(ops, config.rms_norm_eps, layer, w, x, out);
}

}  // namespace k3::cpu
