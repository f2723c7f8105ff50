#include "backend/cpu/weights.h"

#include "core/error.h"

namespace k3 {
namespace {

class Binder {
 public:
  Binder(const LoadPlan& plan, PlanFiles& files, const cpu::LinearOptions& options, const ExpertFilter& experts)
      : plan_(plan), files_(files), options_(options), experts_(experts) {}

  Linear linear(const std::string& name, int64_t expert = -1) {
    const size_t i = index(name);
    return cpu::make_cpu_linear(plan_.bindings[i], plan_.params[i], files_, expert, options_);
  }
  Linear linear_if(bool present, const std::string& name) { return present ? linear(name) : nullptr; }

  Floats floats(const std::string& name) {
    const size_t i = index(name);
    return materialize(plan_.bindings[i], plan_.params[i], files_);
  }

  // The experts of layer `layer`'s bank the filter keeps (all without one); the others null.
  std::vector<Linear> experts(const std::string& name, int64_t layer, int64_t count) {
    std::vector<Linear> out;
    for (int64_t e = 0; e < count; ++e) {
      const bool mine = !experts_ || experts_(layer, e);
      out.push_back(mine ? linear(name, e) : nullptr);
    }
    return out;
  }

 private:
  size_t index(const std::string& name) const {
    const int64_t i = plan_.index_of(name);
    if (i < 0) throw Error(Where{"", name, ""}, "parameter is not in the load plan");
    return static_cast<size_t>(i);
  }

  const LoadPlan& plan_;
  PlanFiles& files_;
  cpu::LinearOptions options_;
  const ExpertFilter& experts_;
};

// AttnRes score vector c = norm.weight ⊙ proj.weight[0] (spec §3.1).
Floats res_score(Binder& b, const std::string& prefix) {
  Floats c = b.floats(prefix + "_norm.weight");
  const Floats proj = b.floats(prefix + "_proj.weight");
  for (size_t i = 0; i < c.size(); ++i) c[i] *= proj[i];
  return c;
}

KdaWeights bind_kda(Binder& b, const K3Config& c, const std::string& p) {
  KdaWeights w;
  w.q = b.linear(p + "q_proj.weight");
  w.k = b.linear(p + "k_proj.weight");
  w.v = b.linear(p + "v_proj.weight");
  w.o = b.linear(p + "o_proj.weight");
  w.g = b.linear_if(c.kda.use_full_rank_gate, p + "g_proj.weight");
  w.g_a = b.linear_if(!c.kda.use_full_rank_gate, p + "g_a_proj.weight");
  w.g_b = b.linear_if(!c.kda.use_full_rank_gate, p + "g_b_proj.weight");
  w.f_a = b.linear(p + "f_a_proj.weight");
  w.f_b = b.linear(p + "f_b_proj.weight");
  w.b = b.linear(p + "b_proj.weight");
  w.conv.q = b.floats(p + "q_conv1d.weight");
  w.conv.k = b.floats(p + "k_conv1d.weight");
  w.conv.v = b.floats(p + "v_conv1d.weight");
  w.a_log = b.floats(p + "A_log");
  w.dt_bias = b.floats(p + "dt_bias");
  w.o_norm = b.floats(p + "o_norm.weight");
  return w;
}

MlaWeights bind_mla(Binder& b, const K3Config& c, const std::string& p) {
  const MlaConfig& m = c.mla;
  MlaWeights w;
  if (m.q_lora_rank) {
    w.q_a = b.linear(p + "q_a_proj.weight");
    w.q_a_norm = b.floats(p + "q_a_layernorm.weight");
    w.q_b = b.linear(p + "q_b_proj.weight");
  } else {
    w.q = b.linear(p + "q_proj.weight");
  }
  w.kv_a = b.linear(p + "kv_a_proj_with_mqa.weight");
  w.kv_a_norm = b.floats(p + "kv_a_layernorm.weight");
  w.kv_b = b.linear(p + "kv_b_proj.weight");
  split_kv_b(b.floats(p + "kv_b_proj.weight"), m, w.absorbed.w_uk, w.absorbed.w_uv);
  w.g = b.linear_if(m.use_output_gate, p + "g_proj.weight");
  w.o = b.linear(p + "o_proj.weight");
  return w;
}

MlpWeights bind_mlp(Binder& b, const std::string& p) {
  return {b.linear(p + "gate_proj.weight"), b.linear(p + "up_proj.weight"), b.linear(p + "down_proj.weight")};
}

CpuHandles::Experts bind_experts(Binder& b, const MoeConfig& m, int64_t layer, const std::string& p) {
  CpuHandles::Experts w;
  w.w1 = b.experts(p + "experts.w1.weight", layer, m.num_experts);
  w.w3 = b.experts(p + "experts.w3.weight", layer, m.num_experts);
  w.w2 = b.experts(p + "experts.w2.weight", layer, m.num_experts);
  return w;
}

MoeWeights bind_moe(Binder& b, const K3Config& c, int64_t layer, const std::string& p) {
  const MoeConfig& m = *c.moe;
  MoeWeights w;
  w.router = b.linear(p + "gate.weight");
  w.correction_bias = m.has_score_correction_bias ? b.floats(p + "gate.e_score_correction_bias")
                                                  : Floats(static_cast<size_t>(m.num_experts), 0.0f);
  if (m.routed_expert_hidden_size) {
    w.latent_down = b.linear(p + "routed_expert_down_proj.weight");
    w.latent_up = b.linear(p + "routed_expert_up_proj.weight");
    if (m.latent_moe_use_norm) w.latent_norm = b.floats(p + "routed_expert_norm.weight");
  }
  w.experts = bind_experts(b, m, layer, p);
  if (m.num_shared_experts > 0) w.shared = bind_mlp(b, p + "shared_experts.");
  return w;
}

Linear view(const Linear& l) { return l ? l->rows_view(0, l->rows()) : nullptr; }

KdaWeights view_kda(const KdaWeights& w) {
  KdaWeights v;
  v.q = view(w.q), v.k = view(w.k), v.v = view(w.v), v.o = view(w.o), v.g = view(w.g);
  v.g_a = view(w.g_a), v.g_b = view(w.g_b), v.f_a = view(w.f_a), v.f_b = view(w.f_b), v.b = view(w.b);
  v.conv = w.conv, v.a_log = w.a_log, v.dt_bias = w.dt_bias, v.o_norm = w.o_norm;
  return v;
}

MlaWeights view_mla(const MlaWeights& w) {
  MlaWeights v;
  v.q_a = view(w.q_a), v.q_b = view(w.q_b), v.q = view(w.q), v.kv_a = view(w.kv_a), v.kv_b = view(w.kv_b);
  v.g = view(w.g), v.o = view(w.o);
  v.q_a_norm = w.q_a_norm, v.kv_a_norm = w.kv_a_norm, v.absorbed = w.absorbed;
  return v;
}

MlpWeights view_mlp(const MlpWeights& w) { return {view(w.gate), view(w.up), view(w.down)}; }

MoeWeights view_moe(const MoeWeights& w, int64_t layer, const ExpertFilter& experts) {
  MoeWeights v;
  v.router = view(w.router), v.latent_down = view(w.latent_down), v.latent_up = view(w.latent_up);
  v.correction_bias = w.correction_bias, v.latent_norm = w.latent_norm;
  v.shared = view_mlp(w.shared);
  const auto bank = [&](const std::vector<Linear>& all) {
    std::vector<Linear> out;
    for (size_t e = 0; e < all.size(); ++e) out.push_back(!experts || experts(layer, static_cast<int64_t>(e)) ? view(all[e]) : nullptr);
    return out;
  };
  v.experts.w1 = bank(w.experts.w1), v.experts.w3 = bank(w.experts.w3), v.experts.w2 = bank(w.experts.w2);
  return v;
}

}  // namespace

ModelWeights view_weights(const ModelWeights& whole, const ExpertFilter& experts) {
  ModelWeights v;
  v.embed = whole.embed;
  for (size_t l = 0; l < whole.layers.size(); ++l) {
    const LayerWeights& w = whole.layers[l];
    LayerWeights& lv = v.layers.emplace_back();
    lv.input_norm = w.input_norm, lv.post_attention_norm = w.post_attention_norm;
    lv.attn_res_c = w.attn_res_c, lv.mlp_res_c = w.mlp_res_c;
    lv.kda = view_kda(w.kda), lv.mla = view_mla(w.mla), lv.mlp = view_mlp(w.mlp);
    lv.moe = view_moe(w.moe, static_cast<int64_t>(l), experts);
  }
  v.final_norm = whole.final_norm, v.output_res_c = whole.output_res_c;
  v.lm_head = view(whole.lm_head);
  return v;
}

void split_kv_b(const std::vector<float>& kv_b, const MlaConfig& m, std::vector<float>& w_uk, std::vector<float>& w_uv) {
  const size_t nh = m.num_heads, dn = m.qk_nope_head_dim, dv = m.v_head_dim, r = m.kv_lora_rank;
  if (kv_b.size() != nh * (dn + dv) * r) throw Error("kv_b: " + std::to_string(kv_b.size()) + " values do not match the MLA dims");
  w_uk.resize(nh * dn * r);
  w_uv.resize(nh * dv * r);
  for (size_t h = 0; h < nh; ++h) {
    const float* head = kv_b.data() + h * (dn + dv) * r;
    std::copy(head, head + dn * r, w_uk.begin() + h * dn * r);
    std::copy(head + dn * r, head + (dn + dv) * r, w_uv.begin() + h * dv * r);
  }
}

namespace {

void check_plan(const LoadPlan& plan) {
  if (!plan.ok()) {
    throw Error(plan.problems.front().where, "the load plan has " + std::to_string(plan.problems.size()) +
                                                 " problem(s), first: " + plan.problems.front().message);
  }
}

}  // namespace

std::vector<CpuHandles::Experts> bind_routed_experts(const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                                                     const cpu::LinearOptions& options, const ExpertFilter& experts) {
  check_plan(plan);
  Binder b(plan, files, options, experts);
  std::vector<CpuHandles::Experts> banks(static_cast<size_t>(config.num_layers));
  for (int64_t l = 0; l < config.num_layers; ++l) {
    if (config.is_moe(l)) banks[static_cast<size_t>(l)] = bind_experts(b, *config.moe, l, layer_prefix(l) + "block_sparse_moe.");
  }
  return banks;
}

ModelWeights bind_weights(const K3Config& config, const LoadPlan& plan, PlanFiles& files, const cpu::LinearOptions& options,
                          const ExpertFilter& experts) {
  check_plan(plan);
  Binder b(plan, files, options, experts);
  ModelWeights w;
  w.embed = b.floats("model.embed_tokens.weight");
  const bool attn_res = config.attn_res_block_size.has_value();
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const std::string p = layer_prefix(l);
    LayerWeights& lw = w.layers.emplace_back();
    lw.input_norm = b.floats(p + "input_layernorm.weight");
    lw.post_attention_norm = b.floats(p + "post_attention_layernorm.weight");
    if (attn_res) {
      lw.attn_res_c = res_score(b, p + "self_attention_res");
      lw.mlp_res_c = res_score(b, p + "mlp_res");
    }
    if (config.is_kda(l)) {
      lw.kda = bind_kda(b, config, p + "self_attn.");
    } else {
      lw.mla = bind_mla(b, config, p + "self_attn.");
    }
    if (config.is_moe(l)) {
      lw.moe = bind_moe(b, config, l, p + "block_sparse_moe.");
    } else {
      lw.mlp = bind_mlp(b, p + "mlp.");
    }
  }
  w.final_norm = b.floats("model.norm.weight");
  if (attn_res) w.output_res_c = res_score(b, "model.output_attn_res");
  w.lm_head = b.linear(config.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  return w;
}

}  // namespace k3
