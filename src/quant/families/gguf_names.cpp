#include "quant/families/gguf_names.h"

#include <type_traits>
#include <variant>

namespace k3::gguf {

const char* gguf_architecture(const K3Config& c) { return c.model_type == ModelType::kKimiK3 ? "kimi-k3" : "kimi-linear"; }

namespace {

// Logical name suffix (after "model.layers.L.") -> GGUF suffix (after "blk.L."), spec §5.4.
// g_proj is KDA's ssm_g or MLA's attn_gate depending on the layer; handled in gguf_tensor_name.
struct NamePair {
  const char* logical;
  const char* gguf;
};
constexpr NamePair kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attention_res_proj.weight", "attn_res_score.weight"},
    {"self_attention_res_norm.weight", "attn_res_score.weight"},
    {"mlp_res_proj.weight", "ffn_res_score.weight"},
    {"mlp_res_norm.weight", "ffn_res_score.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.g_a_proj.weight", "ssm_g_a.weight"},  // [UNCONFIRMED] Kimi-Linear low-rank output gate
    {"self_attn.g_b_proj.weight", "ssm_g_b.weight"},
    {"self_attn.f_a_proj.weight", "ssm_f_a.weight"},
    {"self_attn.f_b_proj.weight", "ssm_f_b.weight"},
    {"self_attn.b_proj.weight", "ssm_beta.weight"},
    {"self_attn.q_conv1d.weight", "ssm_conv1d_q.weight"},
    {"self_attn.k_conv1d.weight", "ssm_conv1d_k.weight"},
    {"self_attn.v_conv1d.weight", "ssm_conv1d_v.weight"},
    {"self_attn.A_log", "ssm_a"},
    {"self_attn.dt_bias", "ssm_dt.bias"},
    {"self_attn.o_norm.weight", "ssm_norm.weight"},
    {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
    {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
    {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
    {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
    {"block_sparse_moe.gate.e_score_correction_bias", "exp_probs_b.bias"},
    {"block_sparse_moe.routed_expert_down_proj.weight", "ffn_routed_down.weight"},
    {"block_sparse_moe.routed_expert_norm.weight", "ffn_routed_norm.weight"},
    {"block_sparse_moe.routed_expert_up_proj.weight", "ffn_routed_up.weight"},
    {"block_sparse_moe.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"block_sparse_moe.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
    {"block_sparse_moe.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
    {"block_sparse_moe.experts.w1.weight", "ffn_gate_exps.weight"},
    {"block_sparse_moe.experts.w3.weight", "ffn_up_exps.weight"},
    {"block_sparse_moe.experts.w2.weight", "ffn_down_exps.weight"},
};
constexpr NamePair kModelNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"lm_head.weight", "output.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"model.output_attn_res_proj.weight", "output_res_score.weight"},
    {"model.output_attn_res_norm.weight", "output_res_score.weight"},
};

}  // namespace

std::string blk(int64_t layer, const std::string& suffix) { return "blk." + std::to_string(layer) + "." + suffix; }

// The GGUF tensor that stores a parameter (for split kv_b see split_kv_b_names).
std::string gguf_tensor_name(const K3Config& c, const ParamSpec& spec) {
  if (spec.layer < 0) {
    for (const auto& n : kModelNames) {
      if (spec.name == n.logical) return n.gguf;
    }
  } else {
    const std::string suffix = spec.name.substr(layer_prefix(spec.layer).size());
    if (suffix == "self_attn.g_proj.weight") return blk(spec.layer, c.is_kda(spec.layer) ? "ssm_g.weight" : "attn_gate.weight");
    for (const auto& n : kLayerNames) {
      if (suffix == n.logical) return blk(spec.layer, n.gguf);
    }
  }
  throw Error(Where{"", spec.name, ""}, "no GGUF name for this parameter");
}

std::pair<std::string, std::string> split_kv_b_names(int64_t layer) {
  return {blk(layer, "attn_k_b.weight"), blk(layer, "attn_v_b.weight")};
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool is_res_norm(const ParamSpec& s) { return s.group == ParamGroup::AttnRes && ends_with(s.name, "_norm.weight"); }
bool is_res_proj(const ParamSpec& s) { return s.group == ParamGroup::AttnRes && ends_with(s.name, "_proj.weight"); }
bool is_a_log(const ParamSpec& s) { return ends_with(s.name, ".A_log"); }
bool is_kv_b(const ParamSpec& s) { return ends_with(s.name, "self_attn.kv_b_proj.weight"); }

Shape squeezed(const Shape& s) {
  Shape out;
  for (auto d : s) {
    if (d != 1) out.push_back(d);
  }
  return out;
}

bool is_float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

std::string float_dtype_name(GgmlType t) {
  return t == GgmlType::F32 ? "F32" : t == GgmlType::F16 ? "F16" : "BF16";
}

// ---- metadata ------------------------------------------------------------------------------

std::optional<int64_t> integer_of(const GgufValue& v) {
  return std::visit(
      [](const auto& x) -> std::optional<int64_t> {
        using V = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<V> && !std::is_same_v<V, bool>) {
          return static_cast<int64_t>(x);
        } else {
          return std::nullopt;
        }
      },
      v.value);
}

// The llama.cpp-style hyper-parameter keys k3 writes and cross-checks, with the config's values.
std::vector<std::pair<std::string, int64_t>> metadata_integers(const K3Config& c) {
  const std::string a = gguf_architecture(c);
  std::vector<std::pair<std::string, int64_t>> kv = {
      {a + ".block_count", c.num_layers},
      {a + ".embedding_length", c.hidden_size},
      {a + ".feed_forward_length", c.intermediate_size},
      {a + ".vocab_size", c.vocab_size},
      {a + ".attention.head_count", c.mla.num_heads},
      {a + ".attention.kv_lora_rank", c.mla.kv_lora_rank},
      {a + ".ssm.d_conv", c.kda.short_conv_kernel_size},
  };
  if (c.mla.q_lora_rank) kv.push_back({a + ".attention.q_lora_rank", *c.mla.q_lora_rank});
  if (c.moe) {
    kv.push_back({a + ".expert_count", c.moe->num_experts});
    kv.push_back({a + ".expert_used_count", c.moe->experts_per_token});
    kv.push_back({a + ".expert_feed_forward_length", c.moe->moe_intermediate_size});
    kv.push_back({a + ".expert_shared_count", c.moe->num_shared_experts});
    kv.push_back({a + ".leading_dense_block_count", c.moe->first_k_dense_replace});
  }
  return kv;
}


}  // namespace k3::gguf
