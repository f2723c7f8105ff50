// Feed-forward blocks (spec §7, §8): dense gated MLP and the MoE layer — fp32 router (sigmoid or
// softmax), correction bias for selection only, grouped top-k, renormalisation, routed scaling;
// latent down / norm / up; SiLU or SiTU experts; shared experts on the full-width input.
//
// Scale contract (quant-formats §3.4, DESIGN.md traps), explicit in gated_mlp: the gate and up GEMMs
// return accumulators without their per-tensor α (NVFP4 weight_scale_2 [× input_scale under W4A4]),
// gated_activation applies α_gate and α_up to them BEFORE SiTU's tanh — exactly once — and GEMM2
// then requantises its input (W4A4) and applies its own α inside `linear`.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/ops.h"

namespace k3::cpu {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

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

void gated_mlp(const ActivationConfig& act, const CpuLinear& gate_w, const CpuLinear& up_w, const CpuLinear& down_w,
               const Tensor& x, Tensor& out) {
  Tensor gate, up;
  linear_accumulators(gate_w, x, gate);
  linear_accumulators(up_w, x, up);
  gated_activation(act, gate, up, gate_w.output_scale(), up_w.output_scale());
  linear(down_w, gate, out);
}

namespace {


}  // namespace

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

void mlp(const K3Config& config, const MlpWeights& w, const Tensor& x, Tensor& out) {
  gated_mlp(config.activation, *w.gate, *w.up, *w.down, x, out);
}

void moe(const K3Config& config, const MoeWeights& w, const Tensor& x, Tensor& out) {
  const MoeConfig& m = *config.moe;
  const int64_t T = x.rows;
  Tensor logits;
  linear(*w.router, x, logits);
  // Tokens per expert, with their routing weights.
  std::vector<std::vector<std::pair<int64_t, float>>> assigned(static_cast<size_t>(m.num_experts));
  for (int64_t t = 0; t < T; ++t) {
    for (const Route& r : route(m, logits.row(t), w.correction_bias)) assigned[r.expert].push_back({t, r.weight});
  }
  Tensor z_owned;
  if (w.latent_down) linear(*w.latent_down, x, z_owned);
  const Tensor& z = w.latent_down ? z_owned : x;
  Tensor routed(T, z.cols);
  for (int64_t e = 0; e < m.num_experts; ++e) {
    const auto& tokens = assigned[static_cast<size_t>(e)];
    if (tokens.empty()) continue;
    Tensor in(static_cast<int64_t>(tokens.size()), z.cols), y;
    for (size_t i = 0; i < tokens.size(); ++i) std::copy_n(z.row(tokens[i].first), z.cols, in.row(static_cast<int64_t>(i)));
    gated_mlp(config.activation, *w.w1[e], *w.w3[e], *w.w2[e], in, y);
    for (size_t i = 0; i < tokens.size(); ++i) {
      float* r = routed.row(tokens[i].first);
      const float* yi = y.row(static_cast<int64_t>(i));
      for (int64_t c = 0; c < z.cols; ++c) r[c] += tokens[i].second * yi[c];
    }
  }
  if (w.latent_up) {
    Tensor normed;
    if (!w.latent_norm.empty()) {
      rms_norm(routed, w.latent_norm, config.rms_norm_eps, normed);
      routed = std::move(normed);
    }
    linear(*w.latent_up, routed, out);
  } else {
    out = std::move(routed);
  }
  if (w.shared.gate) {
    Tensor shared;
    mlp(config, w.shared, x, shared);
    for (size_t i = 0; i < out.data.size(); ++i) out.data[i] += shared.data[i];
  }
}

}  // namespace k3::cpu
