#include "model/parameters.h"

namespace k3 {
namespace {

using Shape = std::vector<uint64_t>;

class Inventory {
 public:
  void add(std::string name, Shape shape, ParamKind kind, ParamGroup group, int64_t layer = -1) {
    params_.push_back({std::move(name), std::move(shape), kind, group, static_cast<int32_t>(layer)});
  }
  std::vector<ParamSpec> take() { return std::move(params_); }

 private:
  std::vector<ParamSpec> params_;
};

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

void add_kda(Inventory& inv, const K3Config& c, int64_t i) {
  const std::string p = layer_prefix(i) + "self_attn.";
  const uint64_t H = u(c.hidden_size), P = u(c.kda.projection_dim()), D = u(c.kda.head_dim),
                 heads = u(c.kda.num_heads), W = u(c.kda.short_conv_kernel_size);
  for (const char* n : {"q_proj", "k_proj", "v_proj"}) inv.add(p + n + ".weight", {P, H}, ParamKind::Linear, ParamGroup::Kda, i);
  if (c.kda.use_full_rank_gate) {
    inv.add(p + "g_proj.weight", {P, H}, ParamKind::Linear, ParamGroup::Kda, i);
  } else {
    inv.add(p + "g_a_proj.weight", {D, H}, ParamKind::Linear, ParamGroup::Kda, i);
    inv.add(p + "g_b_proj.weight", {P, D}, ParamKind::Linear, ParamGroup::Kda, i);
  }
  inv.add(p + "f_a_proj.weight", {D, H}, ParamKind::Linear, ParamGroup::Kda, i);
  inv.add(p + "f_b_proj.weight", {P, D}, ParamKind::Linear, ParamGroup::Kda, i);
  inv.add(p + "b_proj.weight", {heads, H}, ParamKind::Linear, ParamGroup::Kda, i);
  for (const char* n : {"q_conv1d", "k_conv1d", "v_conv1d"}) inv.add(p + n + ".weight", {P, 1, W}, ParamKind::Conv, ParamGroup::Kda, i);
  inv.add(p + "A_log", {heads}, ParamKind::Vector, ParamGroup::Kda, i);
  inv.add(p + "dt_bias", {P}, ParamKind::Vector, ParamGroup::Kda, i);
  inv.add(p + "o_norm.weight", {D}, ParamKind::Vector, ParamGroup::Kda, i);
  inv.add(p + "o_proj.weight", {H, P}, ParamKind::Linear, ParamGroup::Kda, i);
}

void add_mla(Inventory& inv, const K3Config& c, int64_t i) {
  const std::string p = layer_prefix(i) + "self_attn.";
  const MlaConfig& m = c.mla;
  const uint64_t H = u(c.hidden_size), heads = u(m.num_heads), dqk = u(m.qk_head_dim()), rkv = u(m.kv_lora_rank);
  if (m.q_lora_rank) {
    const uint64_t rq = u(*m.q_lora_rank);
    inv.add(p + "q_a_proj.weight", {rq, H}, ParamKind::Linear, ParamGroup::Mla, i);
    inv.add(p + "q_a_layernorm.weight", {rq}, ParamKind::Vector, ParamGroup::Mla, i);
    inv.add(p + "q_b_proj.weight", {heads * dqk, rq}, ParamKind::Linear, ParamGroup::Mla, i);
  } else {
    inv.add(p + "q_proj.weight", {heads * dqk, H}, ParamKind::Linear, ParamGroup::Mla, i);
  }
  inv.add(p + "kv_a_proj_with_mqa.weight", {rkv + u(m.qk_rope_head_dim), H}, ParamKind::Linear, ParamGroup::Mla, i);
  inv.add(p + "kv_a_layernorm.weight", {rkv}, ParamKind::Vector, ParamGroup::Mla, i);
  inv.add(p + "kv_b_proj.weight", {heads * u(m.qk_nope_head_dim + m.v_head_dim), rkv}, ParamKind::Linear, ParamGroup::Mla, i);
  if (m.use_output_gate) inv.add(p + "g_proj.weight", {heads * u(m.v_head_dim), H}, ParamKind::Linear, ParamGroup::Mla, i);
  inv.add(p + "o_proj.weight", {H, heads * u(m.v_head_dim)}, ParamKind::Linear, ParamGroup::Mla, i);
}

void add_gated_mlp(Inventory& inv, const std::string& p, uint64_t H, uint64_t I, ParamGroup group, int64_t i) {
  inv.add(p + "gate_proj.weight", {I, H}, ParamKind::Linear, group, i);
  inv.add(p + "up_proj.weight", {I, H}, ParamKind::Linear, group, i);
  inv.add(p + "down_proj.weight", {H, I}, ParamKind::Linear, group, i);
}

void add_moe(Inventory& inv, const K3Config& c, int64_t i) {
  const MoeConfig& m = *c.moe;
  const std::string p = layer_prefix(i) + "block_sparse_moe.";
  const uint64_t H = u(c.hidden_size), E = u(m.num_experts), I = u(m.moe_intermediate_size);
  const uint64_t width = m.routed_expert_hidden_size ? u(*m.routed_expert_hidden_size) : H;
  inv.add(p + "gate.weight", {E, H}, ParamKind::Linear, ParamGroup::Router, i);
  if (m.has_score_correction_bias) inv.add(p + "gate.e_score_correction_bias", {E}, ParamKind::Vector, ParamGroup::Router, i);
  if (m.routed_expert_hidden_size) {
    inv.add(p + "routed_expert_down_proj.weight", {width, H}, ParamKind::Linear, ParamGroup::Latent, i);
    if (m.latent_moe_use_norm) inv.add(p + "routed_expert_norm.weight", {width}, ParamKind::Vector, ParamGroup::Latent, i);
    inv.add(p + "routed_expert_up_proj.weight", {H, width}, ParamKind::Linear, ParamGroup::Latent, i);
  }
  inv.add(p + "experts.w1.weight", {E, I, width}, ParamKind::ExpertBank, ParamGroup::Experts, i);
  inv.add(p + "experts.w3.weight", {E, I, width}, ParamKind::ExpertBank, ParamGroup::Experts, i);
  inv.add(p + "experts.w2.weight", {E, width, I}, ParamKind::ExpertBank, ParamGroup::Experts, i);
  if (m.num_shared_experts > 0) add_gated_mlp(inv, p + "shared_experts.", H, u(m.shared_intermediate_size()), ParamGroup::Shared, i);
}

}  // namespace

uint64_t ParamSpec::numel() const {
  uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string layer_prefix(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }

std::vector<ParamSpec> parameter_inventory(const K3Config& c) {
  Inventory inv;
  const uint64_t H = u(c.hidden_size), V = u(c.vocab_size);
  const bool attn_res = c.attn_res_block_size.has_value();
  inv.add("model.embed_tokens.weight", {V, H}, ParamKind::Embedding, ParamGroup::Embedding);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = layer_prefix(i);
    inv.add(p + "input_layernorm.weight", {H}, ParamKind::Vector, ParamGroup::Norm, i);
    inv.add(p + "post_attention_layernorm.weight", {H}, ParamKind::Vector, ParamGroup::Norm, i);
    if (attn_res) {
      for (const char* n : {"self_attention_res", "mlp_res"}) {
        inv.add(p + n + "_norm.weight", {H}, ParamKind::Vector, ParamGroup::AttnRes, i);
        inv.add(p + n + "_proj.weight", {1, H}, ParamKind::Vector, ParamGroup::AttnRes, i);
      }
    }
    if (c.is_kda(i)) {
      add_kda(inv, c, i);
    } else {
      add_mla(inv, c, i);
    }
    if (c.is_moe(i)) {
      add_moe(inv, c, i);
    } else {
      add_gated_mlp(inv, p + "mlp.", H, u(c.intermediate_size), ParamGroup::DenseMlp, i);
    }
  }
  inv.add("model.norm.weight", {H}, ParamKind::Vector, ParamGroup::Norm);
  if (attn_res) {
    inv.add("model.output_attn_res_norm.weight", {H}, ParamKind::Vector, ParamGroup::AttnRes);
    inv.add("model.output_attn_res_proj.weight", {1, H}, ParamKind::Vector, ParamGroup::AttnRes);
  }
  if (!c.tie_word_embeddings) inv.add("lm_head.weight", {V, H}, ParamKind::Linear, ParamGroup::Head);
  return inv.take();
}

const char* param_kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::Linear: return "linear";
    case ParamKind::ExpertBank: return "experts";
    case ParamKind::Embedding: return "embedding";
    case ParamKind::Vector: return "vector";
    case ParamKind::Conv: return "conv";
  }
  return "?";
}

const char* param_group_name(ParamGroup group) {
  switch (group) {
    case ParamGroup::Embedding: return "embedding";
    case ParamGroup::Head: return "lm_head";
    case ParamGroup::Norm: return "norms";
    case ParamGroup::AttnRes: return "attn_res";
    case ParamGroup::Kda: return "kda";
    case ParamGroup::Mla: return "mla";
    case ParamGroup::DenseMlp: return "dense_mlp";
    case ParamGroup::Router: return "router";
    case ParamGroup::Latent: return "latent_moe";
    case ParamGroup::Shared: return "shared_experts";
    case ParamGroup::Experts: return "routed_experts";
  }
  return "?";
}

}  // namespace k3
