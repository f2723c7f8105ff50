#include "reference_forward.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "quant/plan/materialize.h"

namespace k3::reference {
namespace {

using Vec = std::vector<double>;
using Mat = std::vector<Vec>;  // [T][features]

// y = W x for W [n, k] row-major.
Vec matvec(const Vec& w, const Vec& x, size_t n) {
  const size_t k = x.size();
  Vec y(n, 0.0);
  for (size_t r = 0; r < n; ++r) {
    double acc = 0;
    for (size_t c = 0; c < k; ++c) acc += w[r * k + c] * x[c];
    y[r] = acc;
  }
  return y;
}

struct Weights {
  const WeightSource& source;
  const ActivationRule& rule;
  std::map<std::string, Vec> cache;
  std::vector<double>* route_margins = nullptr;  // per token, when asked for (forward)
  size_t token = 0;                              // the token the feed-forward is at
  const Vec& operator()(const std::string& name) {
    auto it = cache.find(name);
    if (it == cache.end()) it = cache.emplace(name, source(name)).first;
    return it->second;
  }
  // x as the format of weight `name` multiplies it.
  Vec input_of(const std::string& name, const Vec& x) const {
    Vec xq = x;
    if (rule) rule(name, xq);
    return xq;
  }
  // y = W(name) · x, x under the format's activation rule.
  Vec matvec(const std::string& name, const Vec& x, size_t n) { return reference::matvec((*this)(name), input_of(name, x), n); }
  Mat linear(const std::string& name, const Mat& x, size_t n) {
    Mat y;
    for (const auto& row : x) y.push_back(matvec(name, row, n));
    return y;
  }
};

Vec rmsnorm(const Vec& x, const Vec& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / x.size() + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
  return y;
}

Mat rmsnorm(const Mat& x, const Vec& w, double eps) {
  Mat y;
  for (const auto& row : x) y.push_back(rmsnorm(row, w, eps));
  return y;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// act(gate) * up, with SiLU or SiTU(β, β_lin) (spec §2.1).
double gated_act(const K3Config& c, double g, double u) {
  if (c.activation.kind == Activation::kSilu) return silu(g) * u;
  const double b = c.activation.situ_beta;
  const double gate = b * std::tanh(g / b) * sigmoid(g);
  const double up = c.activation.situ_linear_beta ? *c.activation.situ_linear_beta * std::tanh(u / *c.activation.situ_linear_beta) : u;
  return gate * up;
}

Vec mlp(const K3Config& c, Weights& W, const std::string& p, const Vec& x, size_t inter) {
  const Vec g = W.matvec(p + "gate_proj.weight", x, inter);
  const Vec u = W.matvec(p + "up_proj.weight", x, inter);
  Vec h(inter);
  for (size_t i = 0; i < inter; ++i) h[i] = gated_act(c, g[i], u[i]);
  return W.matvec(p + "down_proj.weight", h, x.size());
}

Mat kda(const K3Config& c, Weights& W, int64_t layer, const Mat& x) {
  const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
  const size_t T = x.size(), H = c.kda.num_heads, D = c.kda.head_dim, P = H * D, Wc = c.kda.short_conv_kernel_size;
  Mat q = W.linear(p + "q_proj.weight", x, P), k = W.linear(p + "k_proj.weight", x, P), v = W.linear(p + "v_proj.weight", x, P);
  // causal depthwise conv + SiLU on the pre-conv projections
  auto conv = [&](Mat& m, const std::string& name) {
    const Vec& w = W(p + name + ".weight");
    Mat out(T, Vec(P));
    for (size_t t = 0; t < T; ++t) {
      for (size_t ch = 0; ch < P; ++ch) {
        double acc = 0;
        for (size_t j = 0; j < Wc; ++j) {
          const int64_t src = static_cast<int64_t>(t) - static_cast<int64_t>(Wc - 1) + static_cast<int64_t>(j);
          if (src >= 0) acc += w[ch * Wc + j] * m[src][ch];
        }
        out[t][ch] = silu(acc);
      }
    }
    m = out;
  };
  conv(q, "q_conv1d");
  conv(k, "k_conv1d");
  conv(v, "v_conv1d");
  const Mat f = W.linear(p + "f_b_proj.weight", W.linear(p + "f_a_proj.weight", x, D), P);
  const Mat b = W.linear(p + "b_proj.weight", x, H);
  const Mat g_out = c.kda.use_full_rank_gate ? W.linear(p + "g_proj.weight", x, P)
                                             : W.linear(p + "g_b_proj.weight", W.linear(p + "g_a_proj.weight", x, D), P);
  const Vec& A_log = W(p + "A_log");
  const Vec& dt_bias = W(p + "dt_bias");
  const Vec& o_norm = W(p + "o_norm.weight");
  Mat y(T, Vec(P));
  for (size_t h = 0; h < H; ++h) {
    Vec S(D * D, 0.0);  // S[k][v]
    for (size_t t = 0; t < T; ++t) {
      Vec qh(D), kh(D), vh(D), alpha(D);
      for (size_t d = 0; d < D; ++d) {
        qh[d] = q[t][h * D + d];
        kh[d] = k[t][h * D + d];
        vh[d] = v[t][h * D + d];
        const double fv = f[t][h * D + d] + dt_bias[h * D + d];
        const double gate = c.kda.gate_lower_bound ? *c.kda.gate_lower_bound * sigmoid(std::exp(A_log[h]) * fv)
                                                   : -std::exp(A_log[h]) * softplus(fv);
        alpha[d] = std::exp(gate);
      }
      auto l2 = [D](Vec& a) {
        double ss = 0;
        for (double z : a) ss += z * z;
        const double r = 1.0 / std::sqrt(ss + 1e-6);
        for (double& z : a) z *= r;
      };
      l2(qh);
      l2(kh);
      for (double& z : qh) z /= std::sqrt(static_cast<double>(D));
      const double beta = sigmoid(b[t][h]);
      for (size_t i = 0; i < D; ++i) {
        for (size_t j = 0; j < D; ++j) S[i * D + j] *= alpha[i];
      }
      Vec u(D);
      for (size_t j = 0; j < D; ++j) {
        double sk = 0;
        for (size_t i = 0; i < D; ++i) sk += S[i * D + j] * kh[i];
        u[j] = beta * (vh[j] - sk);
      }
      for (size_t i = 0; i < D; ++i) {
        for (size_t j = 0; j < D; ++j) S[i * D + j] += kh[i] * u[j];
      }
      Vec o(D, 0.0);
      for (size_t j = 0; j < D; ++j) {
        for (size_t i = 0; i < D; ++i) o[j] += S[i * D + j] * qh[i];
      }
      const Vec on = rmsnorm(o, o_norm, c.rms_norm_eps);
      for (size_t d = 0; d < D; ++d) y[t][h * D + d] = on[d] * sigmoid(g_out[t][h * D + d]);
    }
  }
  return W.linear(p + "o_proj.weight", y, c.hidden_size);
}

Mat mla(const K3Config& c, Weights& W, int64_t layer, const Mat& x) {
  const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
  const MlaConfig& m = c.mla;
  const size_t T = x.size(), nh = m.num_heads, dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim, dv = m.v_head_dim,
               dqk = dn + dr, rkv = m.kv_lora_rank;
  Mat q;
  if (m.q_lora_rank) {
    q = W.linear(p + "q_b_proj.weight", rmsnorm(W.linear(p + "q_a_proj.weight", x, *m.q_lora_rank), W(p + "q_a_layernorm.weight"), m.low_rank_norm_eps), nh * dqk);
  } else {
    q = W.linear(p + "q_proj.weight", x, nh * dqk);
  }
  const Mat kv = W.linear(p + "kv_a_proj_with_mqa.weight", x, rkv + dr);
  Mat latent(T), kpe(T);
  for (size_t t = 0; t < T; ++t) {
    latent[t] = rmsnorm(Vec(kv[t].begin(), kv[t].begin() + rkv), W(p + "kv_a_layernorm.weight"), m.low_rank_norm_eps);
    kpe[t] = Vec(kv[t].begin() + rkv, kv[t].end());
  }
  const Mat kvb = W.linear(p + "kv_b_proj.weight", latent, nh * (dn + dv));
  const double scale = 1.0 / std::sqrt(static_cast<double>(dqk));
  Mat o(T, Vec(nh * dv, 0.0));
  for (size_t h = 0; h < nh; ++h) {
    for (size_t t = 0; t < T; ++t) {
      Vec s(t + 1);
      for (size_t j = 0; j <= t; ++j) {
        double acc = 0;
        for (size_t d = 0; d < dn; ++d) acc += q[t][h * dqk + d] * kvb[j][h * (dn + dv) + d];
        for (size_t d = 0; d < dr; ++d) acc += q[t][h * dqk + dn + d] * kpe[j][d];
        s[j] = acc * scale;
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& z : s) sum += (z = std::exp(z - mx));
      for (size_t j = 0; j <= t; ++j) {
        for (size_t d = 0; d < dv; ++d) o[t][h * dv + d] += s[j] / sum * kvb[j][h * (dn + dv) + dn + d];
      }
    }
  }
  if (m.use_output_gate) {
    const Mat g = W.linear(p + "g_proj.weight", x, nh * dv);
    for (size_t t = 0; t < T; ++t) {
      for (size_t i = 0; i < nh * dv; ++i) o[t][i] *= sigmoid(g[t][i]);
    }
  }
  return W.linear(p + "o_proj.weight", o, c.hidden_size);
}

// Router (spec §7.1): selected experts and their weights for one token.
std::vector<std::pair<int64_t, double>> route(const K3Config& c, Weights& W, const std::string& p, const Vec& x) {
  const MoeConfig& m = *c.moe;
  const size_t E = m.num_experts;
  const Vec logits = W.matvec(p + "gate.weight", x, E);
  const Vec bias = m.has_score_correction_bias ? W(p + "gate.e_score_correction_bias") : Vec(E, 0.0);
  RouteRef r = reference::route(m, logits.data(), bias);
  if (W.route_margins) (*W.route_margins)[W.token] = std::min((*W.route_margins)[W.token], r.margin);
  return std::move(r.picked);
}

Vec moe(const K3Config& c, Weights& W, int64_t layer, const Vec& x) {
  const MoeConfig& m = *c.moe;
  const std::string p = "model.layers." + std::to_string(layer) + ".block_sparse_moe.";
  const size_t H = c.hidden_size, I = m.moe_intermediate_size;
  const size_t L = m.routed_expert_hidden_size ? *m.routed_expert_hidden_size : H;
  const Vec z = m.routed_expert_hidden_size ? W.matvec(p + "routed_expert_down_proj.weight", x, L) : x;
  const Vec& w1 = W(p + "experts.w1.weight");
  const Vec& w3 = W(p + "experts.w3.weight");
  const Vec& w2 = W(p + "experts.w2.weight");
  Vec r(L, 0.0);
  const Vec z1 = W.input_of(p + "experts.w1.weight", z), z3 = W.input_of(p + "experts.w3.weight", z);
  for (auto [e, weight] : route(c, W, p, x)) {
    Vec h(I);
    for (size_t i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (size_t k = 0; k < L; ++k) {
        g += w1[(e * I + i) * L + k] * z1[k];
        u += w3[(e * I + i) * L + k] * z3[k];
      }
      h[i] = gated_act(c, g, u);
    }
    h = W.input_of(p + "experts.w2.weight", h);
    for (size_t o = 0; o < L; ++o) {
      double acc = 0;
      for (size_t i = 0; i < I; ++i) acc += w2[(e * L + o) * I + i] * h[i];
      r[o] += weight * acc;
    }
  }
  Vec out = r;
  if (m.routed_expert_hidden_size) {
    if (m.latent_moe_use_norm) r = rmsnorm(r, W(p + "routed_expert_norm.weight"), c.rms_norm_eps);
    out = W.matvec(p + "routed_expert_up_proj.weight", r, H);
  }
  if (m.num_shared_experts > 0) {
    const Vec s = mlp(c, W, p + "shared_experts.", x, m.shared_intermediate_size());
    for (size_t i = 0; i < H; ++i) out[i] += s[i];
  }
  return out;
}

Mat ffn(const K3Config& c, Weights& W, int64_t layer, const Mat& x) {
  Mat out;
  for (const auto& row : x) {
    W.token = out.size();
    out.push_back(c.is_moe(layer) ? moe(c, W, layer, row)
                                  : mlp(c, W, "model.layers." + std::to_string(layer) + ".mlp.", row, c.intermediate_size));
  }
  return out;
}

// AttnResMix (spec §3.2), per token: softmax over candidates scored by RMS-normalised ⟨v, norm⊙proj⟩.
Vec attn_res_mix(const std::vector<const Vec*>& cand, const Vec& norm, const Vec& proj, double eps) {
  const size_t H = norm.size();
  Vec score;
  for (const Vec* v : cand) {
    double ss = 0, dot = 0;
    for (size_t i = 0; i < H; ++i) {
      ss += (*v)[i] * (*v)[i];
      dot += (*v)[i] * norm[i] * proj[i];
    }
    score.push_back(dot / std::sqrt(ss / H + eps));
  }
  const double mx = *std::max_element(score.begin(), score.end());
  double sum = 0;
  for (double& s : score) sum += (s = std::exp(s - mx));
  Vec out(H, 0.0);
  for (size_t j = 0; j < cand.size(); ++j) {
    for (size_t i = 0; i < H; ++i) out[i] += score[j] / sum * (*cand[j])[i];
  }
  return out;
}

Mat mix(const Mat& run, const std::vector<Mat>& bank, Weights& W, const std::string& prefix, double eps) {
  Mat out;
  for (size_t t = 0; t < run.size(); ++t) {
    std::vector<const Vec*> cand;
    for (const auto& b : bank) cand.push_back(&b[t]);
    cand.push_back(&run[t]);
    out.push_back(attn_res_mix(cand, W(prefix + "_norm.weight"), W(prefix + "_proj.weight"), eps));
  }
  return out;
}

Mat add(const Mat& a, const Mat& b) {
  Mat out = a;
  for (size_t t = 0; t < a.size(); ++t) {
    for (size_t i = 0; i < a[t].size(); ++i) out[t][i] += b[t][i];
  }
  return out;
}

}  // namespace

ActivationRule format_activation_rule(const LoadPlan& plan, PlanFiles& files) {
  struct Rule {
    int64_t block = 0;  // 0: one scale per token
    bool is_static = false;
    double scale = 0, offset = 0;
  };
  std::map<std::string, Rule> rules;
  for (size_t i = 0; i < plan.bindings.size(); ++i) {
    const Binding& b = plan.bindings[i];
    const auto scalar = [&](const char* role) { return static_cast<double>(decode_source(b.part(role)->tensors.at(0), files).at(0)); };
    if (b.scheme.kind == SchemeKind::W4A8 || b.scheme.kind == SchemeKind::W8A8) {
      rules[b.param] = b.scheme.static_activation ? Rule{0, true, scalar("input_scale"), scalar("input_offset")} : Rule{};
    } else if (b.scheme.kind == SchemeKind::Ggml) {
      const std::string& t = b.scheme.storage;
      if (t == "F32" || t == "F16" || t == "BF16") continue;
      rules[b.param] = Rule{t.size() > 2 && t.substr(t.size() - 2) == "_K" ? 256 : 32};
    }
  }
  return [rules](const std::string& weight, std::vector<double>& x) {
    const auto it = rules.find(weight);
    if (it == rules.end()) return;
    const Rule& r = it->second;
    if (r.is_static) {
      for (double& v : x) v = (std::clamp(std::nearbyint(v / r.scale) + r.offset, -128.0, 127.0) - r.offset) * r.scale;
      return;
    }
    const size_t block = r.block > 0 ? static_cast<size_t>(r.block) : x.size();
    for (size_t b0 = 0; b0 < x.size(); b0 += block) {
      double amax = 0;
      for (size_t i = b0; i < b0 + block; ++i) amax = std::max(amax, std::fabs(x[i]));
      const double step = amax / 127.0;
      for (size_t i = b0; i < b0 + block; ++i) x[i] = amax > 0 ? std::nearbyint(x[i] / step) * step : 0.0;
    }
  };
}

Rows kda_block(const K3Config& c, const WeightSource& source, int64_t layer, const Rows& x, const ActivationRule& rule) {
  Weights W{source, rule, {}};
  return kda(c, W, layer, x);
}

Rows mla_block(const K3Config& c, const WeightSource& source, int64_t layer, const Rows& x, const ActivationRule& rule) {
  Weights W{source, rule, {}};
  return mla(c, W, layer, x);
}

Rows ffn_block(const K3Config& c, const WeightSource& source, int64_t layer, const Rows& x, const ActivationRule& rule) {
  Weights W{source, rule, {}};
  return ffn(c, W, layer, x);
}

std::vector<double> forward(const K3Config& c, const WeightSource& source, const std::vector<int64_t>& ids,
                            const ActivationRule& rule, std::vector<double>* route_margins) {
  Weights W{source, rule, {}};
  const size_t H = c.hidden_size, T = ids.size();
  if (route_margins) route_margins->assign(T, INFINITY);
  W.route_margins = route_margins;
  const Vec& emb = W("model.embed_tokens.weight");
  Mat x(T);
  for (size_t t = 0; t < T; ++t) x[t] = Vec(emb.begin() + ids[t] * H, emb.begin() + (ids[t] + 1) * H);
  const double eps = c.rms_norm_eps;
  Mat final_in;
  if (!c.attn_res_block_size) {
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const Mat n1 = rmsnorm(x, W(p + "input_layernorm.weight"), eps);
      x = add(x, c.is_kda(l) ? kda(c, W, l, n1) : mla(c, W, l, n1));
      x = add(x, ffn(c, W, l, rmsnorm(x, W(p + "post_attention_layernorm.weight"), eps)));
    }
    final_in = x;
  } else {
    const int64_t block = *c.attn_res_block_size;
    std::vector<Mat> bank;
    Mat run = x;
    bool run_empty = false;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const Mat h = bank.empty() ? run : mix(run, bank, W, p + "self_attention_res", eps);
      if (l % block == 0) {
        bank.push_back(run);
        run_empty = true;
      }
      const Mat a = c.is_kda(l) ? kda(c, W, l, rmsnorm(h, W(p + "input_layernorm.weight"), eps))
                                : mla(c, W, l, rmsnorm(h, W(p + "input_layernorm.weight"), eps));
      run = run_empty ? a : add(run, a);
      run_empty = false;
      const Mat h2 = mix(run, bank, W, p + "mlp_res", eps);
      run = add(run, ffn(c, W, l, rmsnorm(h2, W(p + "post_attention_layernorm.weight"), eps)));
    }
    final_in = mix(run, bank, W, "model.output_attn_res", eps);
  }
  const Mat n = rmsnorm(final_in, W("model.norm.weight"), eps);
  const std::string head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  std::vector<double> logits;
  for (const auto& row : n) {
    const Vec l = W.matvec(head, row, c.vocab_size);
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}

RouteRef route(const MoeConfig& m, const double* logits, const std::vector<double>& bias) {
  const size_t E = static_cast<size_t>(m.num_experts);
  Vec s(E), choice(E);
  if (m.scoring == RouterScoring::kSigmoid) {
    for (size_t e = 0; e < E; ++e) s[e] = sigmoid(logits[e]);
  } else {
    const double mx = *std::max_element(logits, logits + E);
    double sum = 0;
    for (size_t e = 0; e < E; ++e) sum += (s[e] = std::exp(logits[e] - mx));
    for (double& v : s) v /= sum;
  }
  for (size_t e = 0; e < E; ++e) choice[e] = s[e] + bias[e];
  RouteRef r;
  const size_t groups = m.use_grouped_topk ? static_cast<size_t>(m.num_expert_group) : 1;
  if (groups > 1 && m.topk_group < static_cast<int64_t>(groups)) {
    const size_t per = E / groups;
    std::vector<std::pair<double, size_t>> gs;
    for (size_t g = 0; g < groups; ++g) {
      Vec members(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::sort(members.rbegin(), members.rend());
      gs.push_back({members[0] + (per > 1 ? members[1] : 0.0), g});
    }
    std::stable_sort(gs.begin(), gs.end(), [](auto& a, auto& b) { return a.first > b.first; });
    const size_t kept = static_cast<size_t>(m.topk_group);
    r.margin = std::min(r.margin, gs[kept - 1].first - gs[kept].first);
    std::vector<bool> keep(groups, false);
    for (size_t i = 0; i < kept; ++i) keep[gs[i].second] = true;
    for (size_t e = 0; e < E; ++e) {
      if (!keep[e / per]) choice[e] = -INFINITY;
    }
  }
  std::vector<size_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return choice[a] > choice[b]; });
  const size_t k = static_cast<size_t>(m.experts_per_token);
  for (size_t i = 0; i + 1 < std::min(E, k + 1); ++i) {
    if (std::isfinite(choice[order[i + 1]])) r.margin = std::min(r.margin, choice[order[i]] - choice[order[i + 1]]);
  }
  double total = 0;
  for (size_t i = 0; i < k; ++i) {
    r.picked.push_back({static_cast<int64_t>(order[i]), s[order[i]]});
    total += s[order[i]];
  }
  for (auto& [e, w] : r.picked) w = (m.renormalize ? w / total : w) * m.routed_scaling_factor;
  return r;
}

}  // namespace k3::reference
