#include "model/known_configs.h"

namespace k3 {
namespace {

struct KnownConfig {
  const char* name;
  const char* json;
};

// moonshotai/Kimi-Linear-48B-A3B-Instruct, config.json as published on Hugging Face: every field the
// text model reads, with the values of the public file (read through its public mirrors: the NVFP4
// re-quantisation Firworks/Kimi-Linear-48B-A3B-Instruct-nvfp4, which copies the original's fields,
// and restatements of the full field list in open-source loaders that agree with it). Left out:
// metadata that no loader reads (auto_map, dtype, transformers_version, initializer_range).
constexpr const char* kKimiLinear48bA3b = R"({
  "architectures": ["KimiLinearForCausalLM"],
  "bos_token_id": 163584,
  "eos_token_id": 163586,
  "first_k_dense_replace": 1,
  "head_dim": 72,
  "hidden_act": "silu",
  "hidden_size": 2304,
  "intermediate_size": 9216,
  "kv_lora_rank": 512,
  "linear_attn_config": {
    "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
    "head_dim": 128,
    "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
    "num_heads": 32,
    "short_conv_kernel_size": 4
  },
  "mla_use_nope": true,
  "model_max_length": 1048576,
  "model_type": "kimi_linear",
  "moe_intermediate_size": 1024,
  "moe_layer_freq": 1,
  "moe_renormalize": true,
  "moe_router_activation_func": "sigmoid",
  "num_attention_heads": 32,
  "num_expert_group": 1,
  "num_experts": 256,
  "num_experts_per_token": 8,
  "num_hidden_layers": 27,
  "num_key_value_heads": 32,
  "num_nextn_predict_layers": 0,
  "num_shared_experts": 1,
  "pad_token_id": 163839,
  "q_lora_rank": null,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "routed_scaling_factor": 2.446,
  "tie_word_embeddings": false,
  "topk_group": 1,
  "use_cache": true,
  "use_grouped_topk": true,
  "v_head_dim": 128,
  "vocab_size": 163840
})";

constexpr KnownConfig kKnown[] = {{"kimi-linear-48b-a3b", kKimiLinear48bA3b}};

}  // namespace

std::optional<std::string> known_config_json(const std::string& name) {
  for (const KnownConfig& c : kKnown) {
    if (name == c.name) return std::string(c.json);
  }
  return std::nullopt;
}

std::vector<std::string> known_config_names() {
  std::vector<std::string> names;
  for (const KnownConfig& c : kKnown) names.emplace_back(c.name);
  return names;
}

}  // namespace k3
