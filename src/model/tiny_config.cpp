#include "model/tiny_config.h"

#include "core/error.h"

namespace k3 {
namespace {

struct Dims {
  int hidden, vocab, layers, dense_inter, kda_heads, kda_head_dim, mla_heads, q_lora, kv_lora, nope, rope, v_head,
      experts, top_k, shared, moe_inter, latent, attn_res_block;
};

// kimi-k3 tiny: 6 layers, KDA at 1-based 1,2,3,5 and MLA at 4,6 (the real schedule's shape: 3 KDA : 1
// MLA, last layer MLA); layer 0 dense, 1..5 MoE; AttnRes blocks of 2 so that several banks seal.
constexpr Dims kK3Tiny{256, 512, 6, 512, 4, 32, 4, 128, 256, 32, 16, 32, 8, 2, 1, 256, 256, 2};
constexpr Dims kK3Small{1024, 32768, 8, 4096, 8, 128, 8, 512, 512, 128, 64, 128, 32, 4, 1, 512, 512, 4};
constexpr Dims kLinearTiny{128, 512, 6, 256, 4, 32, 4, 64, 256, 32, 16, 32, 8, 2, 1, 256, 0, 0};
constexpr Dims kLinearSmall{1024, 32768, 8, 4096, 8, 128, 8, 512, 512, 128, 64, 128, 32, 4, 1, 512, 0, 0};

Json layer_lists(int layers) {
  Json kda = Json::array(), mla = Json::array();
  for (int l = 1; l <= layers; ++l) (l % 4 == 0 || l == layers ? mla : kda).push_back(l);
  return {{"kda_layers", kda}, {"full_attn_layers", mla}};
}

// Token ids of the tokenizer make-tiny writes beside the model (write_tiny_tokenizer with the last
// 256 ids as specials): [BOS] at offset 0, <|end_of_msg|> (the generation eos) at 2, [PAD] at 255.
int tiny_bos(const Dims& d) { return d.vocab - 256; }
int tiny_eos(const Dims& d) { return d.vocab - 256 + 2; }
int tiny_pad(const Dims& d) { return d.vocab - 1; }

Json text_model(TinyArch arch, const Dims& d) {
  const bool k3 = arch == TinyArch::KimiK3;
  Json linear = layer_lists(d.layers);
  linear["num_heads"] = d.kda_heads;
  linear["head_dim"] = d.kda_head_dim;
  linear["short_conv_kernel_size"] = 4;
  linear["use_full_rank_gate"] = k3;
  if (k3) linear["gate_lower_bound"] = -5.0;
  Json t = {
      {"model_type", "kimi_linear"},
      {"architectures", {"KimiLinearForCausalLM"}},
      {"hidden_size", d.hidden},
      {"vocab_size", d.vocab},
      {"num_hidden_layers", d.layers},
      {"intermediate_size", d.dense_inter},
      {"rms_norm_eps", 1e-5},
      {"hidden_act", k3 ? "situ" : "silu"},
      {"tie_word_embeddings", false},
      {"num_nextn_predict_layers", 0},
      {"linear_attn_config", linear},
      {"num_attention_heads", d.mla_heads},
      {"num_key_value_heads", d.mla_heads},
      {"q_lora_rank", d.q_lora},
      {"kv_lora_rank", d.kv_lora},
      {"qk_nope_head_dim", d.nope},
      {"qk_rope_head_dim", d.rope},
      {"v_head_dim", d.v_head},
      {"mla_use_nope", true},
      {"mla_use_output_gate", k3},
      {"num_experts", d.experts},
      {"num_experts_per_token", d.top_k},
      {"num_shared_experts", d.shared},
      {"moe_intermediate_size", d.moe_inter},
      {"first_k_dense_replace", 1},
      {"moe_layer_freq", 1},
      {"moe_router_activation_func", "sigmoid"},
      {"moe_renormalize", true},
      {"routed_scaling_factor", k3 ? 1.0 : 2.446},
      {"topk_method", "noaux_tc"},
      {"use_grouped_topk", true},
      {"num_expert_group", k3 ? 1 : 2},
      {"topk_group", 1},
      {"bos_token_id", tiny_bos(d)},
      {"eos_token_id", tiny_eos(d)},
      {"pad_token_id", tiny_pad(d)},
  };
  if (k3) {
    t["activation_situ_beta"] = 4.0;
    t["activation_situ_linear_beta"] = 25.0;
    t["attn_res_block_size"] = d.attn_res_block;
    t["routed_expert_hidden_size"] = d.latent;
    t["latent_moe_use_norm"] = true;
  }
  return t;
}

}  // namespace

TinyArch parse_tiny_arch(const std::string& name) {
  if (name == "kimi-k3") return TinyArch::KimiK3;
  if (name == "kimi-linear") return TinyArch::KimiLinear;
  throw Error(Where{"", "", "--arch"}, "unknown architecture '" + name + "' (expected kimi-k3 or kimi-linear)");
}

TinySize parse_tiny_size(const std::string& name) {
  if (name == "tiny") return TinySize::Tiny;
  if (name == "small") return TinySize::Small;
  throw Error(Where{"", "", "--size"}, "unknown size '" + name + "' (expected tiny or small)");
}

Json tiny_config_json(TinyArch arch, TinySize size) {
  const bool k3 = arch == TinyArch::KimiK3;
  const Dims& d = k3 ? (size == TinySize::Tiny ? kK3Tiny : kK3Small) : (size == TinySize::Tiny ? kLinearTiny : kLinearSmall);
  Json text = text_model(arch, d);
  if (!k3) return text;
  return {{"model_type", "kimi_k3"},
          {"architectures", {"KimiK3ForConditionalGeneration"}},
          {"bos_token_id", tiny_bos(d)},
          {"eos_token_id", tiny_eos(d)},
          {"pad_token_id", tiny_pad(d)},
          {"tie_word_embeddings", false},
          {"text_config", text}};
}

Json& text_config_of(Json& doc) { return doc.contains("text_config") ? doc["text_config"] : doc; }

}  // namespace k3
