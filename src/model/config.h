// The validated text-model configuration of a Kimi-Linear / Kimi-K3 checkpoint (config.json),
// and generation_config.json. Spec: k3-architecture.md §1 (fields), §2 (structure), §4 (layer
// dispatch), §5–§7 (MLA, KDA, MoE).
//
// Accepted layouts:
//  - model_type "kimi_linear": the text fields are at the top level;
//  - model_type "kimi_k3": a multimodal wrapper; the text fields are under `text_config`, whose own
//    model_type must be "kimi_linear" (the real release, spec §1). The vision part is ignored.
// Load-bearing fields are required; a missing one is an error naming the file and key path.
// The few fields with a reference default are listed in one table in config.cpp
// (kReferenceDefaults), applied only when the key is absent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/json.h"

namespace k3 {

enum class ModelType { kKimiLinear, kKimiK3 };
enum class MixerKind { kKda, kMla };  // token mixer of a layer (spec §4)
enum class FfnKind { kDense, kMoe };  // feed-forward of a layer (spec §4)
enum class Activation { kSilu, kSitu };
enum class RouterScoring { kSigmoid, kSoftmax };

// Upper bounds that keep every later size computation far from overflow; real models are orders of
// magnitude below them.
inline constexpr int64_t kMaxConfigLayers = int64_t{1} << 14;
inline constexpr int64_t kMaxConfigDim = int64_t{1} << 24;
inline constexpr int64_t kMaxConfigExperts = int64_t{1} << 16;
inline constexpr int64_t kMaxConfigContext = int64_t{1} << 40;
// Matrix row counts that are products of two fields (num_attention_heads × head dims,
// num_shared_experts × moe_intermediate_size) are bounded by kMaxConfigDim as well, and the
// whole parameter inventory by kMaxConfigParameters (a real K3 has about 2^40), so that no
// element or byte count of any tensor, nor their sum, can wrap in 64 bits.
inline constexpr int64_t kMaxConfigParameters = int64_t{1} << 48;

// Plausible ranges of the float fields. Real checkpoints sit well inside them (rms_norm_eps 1e-5 or
// 1e-6, routed_scaling_factor 1 to 2.5, SiTU betas 4 and 25, gate_lower_bound -5); values outside
// give all-zero or non-finite activations in float32 (e.g. rms_norm_eps 1e308 or
// routed_scaling_factor 1e308), so they are refused when the config is read.
inline constexpr double kMinRmsNormEps = 1e-12;
inline constexpr double kMaxRmsNormEps = 1e-1;
inline constexpr double kMinRoutedScalingFactor = 1e-3;
inline constexpr double kMaxRoutedScalingFactor = 1e3;
inline constexpr double kMinSituBeta = 1e-3;             // activation_situ_beta, activation_situ_linear_beta
inline constexpr double kMaxSituBeta = 1e6;
inline constexpr double kMinGateLowerBound = -1e3;       // linear_attn_config.gate_lower_bound
inline constexpr double kMaxGateLowerBound = -1e-6;      // must be a decay (< 0)
inline constexpr double kMaxGenerationTemperature = 1e3;  // generation_config.json temperature

// [UNCONFIRMED] eps of the MLA q_a_layernorm / kv_a_layernorm: the HF reference builds them with
// the KimiRMSNorm default 1e-6, sglang uses rms_norm_eps (1e-5). Spec §5 recommends 1e-6 (§12.1).
inline constexpr double kMlaLowRankNormEps = 1e-6;

// SiTU gate cap when activation_situ_beta is null or absent (spec §1: "code falls back to 1.0").
inline constexpr double kSituBetaWhenNull = 1.0;

struct ActivationConfig {
  Activation kind = Activation::kSilu;
  // SiTU only (spec §2.1): gate' = β·tanh(gate/β)·sigmoid(gate); up' = β_lin·tanh(up/β_lin) when set.
  double situ_beta = kSituBetaWhenNull;
  std::optional<double> situ_linear_beta;
};

// KDA layers (spec §6), from `linear_attn_config`.
struct KdaConfig {
  int64_t num_heads = 0;               // H_k
  int64_t head_dim = 0;                // D: key AND value head dim (see value_head_dim note in .cpp)
  int64_t short_conv_kernel_size = 0;  // W
  // Set: the bounded "safe" forget gate g = LB·sigmoid(exp(A_log)·(f + dt_bias)) (K3).
  // Unset: g = −exp(A_log)·softplus(f + dt_bias) (Kimi-Linear). Spec §6.3.
  std::optional<double> gate_lower_bound;
  // true: output gate is one dense g_proj [P, hidden] (K3); false: g_b_proj(g_a_proj(x)) with
  // rank head_dim (Kimi-Linear). The forget gate is always low rank (f_a, f_b). Spec §6.1.
  bool use_full_rank_gate = false;

  int64_t projection_dim() const { return num_heads * head_dim; }  // P
};

// MLA layers (spec §5). Only the NoPE form exists (mla_use_nope must be true): the "rope" part of
// q/k is carried but never rotated, and positions are unused.
struct MlaConfig {
  int64_t num_heads = 0;                // n_h
  std::optional<int64_t> q_lora_rank;   // r_q; nullopt: direct q_proj [n_h·d_qk, hidden]
  int64_t kv_lora_rank = 0;             // r_kv
  int64_t qk_nope_head_dim = 0;         // d_nope
  int64_t qk_rope_head_dim = 0;         // d_rope (unrotated)
  int64_t v_head_dim = 0;               // d_v
  bool use_output_gate = false;         // o *= sigmoid(g_proj(x)) before o_proj
  double low_rank_norm_eps = kMlaLowRankNormEps;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  double softmax_scale() const;         // qk_head_dim^-0.5; no YaRN mscale (no rope_scaling)
};

// MoE layers (spec §7).
struct MoeConfig {
  int64_t num_experts = 0;              // routed experts (num_experts)
  int64_t experts_per_token = 0;        // top-k (num_experts_per_token)
  int64_t num_shared_experts = 0;       // shared expert width = num_shared_experts × moe_intermediate_size
  int64_t moe_intermediate_size = 0;    // per-expert FFN width
  int64_t first_k_dense_replace = 0;    // layers below are dense
  int64_t moe_layer_freq = 1;           // MoE iff idx >= first_k_dense_replace and idx % freq == 0
  RouterScoring scoring = RouterScoring::kSigmoid;
  bool renormalize = true;              // moe_renormalize: top-k weights sum to 1
  double routed_scaling_factor = 1.0;
  bool use_grouped_topk = true;
  int64_t num_expert_group = 1;         // n_group
  int64_t topk_group = 1;
  // The Kimi router always owns e_score_correction_bias (used for selection only); topk_method must
  // be "noaux_tc".
  bool has_score_correction_bias = true;
  // Latent MoE: routed experts run in this width between routed_expert_down_proj and
  // routed_expert_up_proj; nullopt: experts act on the hidden state directly.
  std::optional<int64_t> routed_expert_hidden_size;
  bool latent_moe_use_norm = false;     // RMSNorm (routed_expert_norm) on the latent sum

  int64_t shared_intermediate_size() const { return num_shared_experts * moe_intermediate_size; }
};

struct TokenIds {
  std::optional<int64_t> bos;
  std::vector<int64_t> eos;  // empty when not given
  std::optional<int64_t> pad;
};

struct K3Config {
  std::string file;              // the config.json it came from
  ModelType model_type = ModelType::kKimiLinear;
  std::string text_path;         // key path of the text model in the file: "" or "text_config"

  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  int64_t num_layers = 0;
  int64_t intermediate_size = 0;  // dense MLP width
  double rms_norm_eps = 0;
  bool tie_word_embeddings = false;
  int64_t num_nextn_predict_layers = 0;
  ActivationConfig activation;
  // AttnRes block size (spec §3); nullopt: the plain pre-norm residual (spec §2.3).
  std::optional<int64_t> attn_res_block_size;

  KdaConfig kda;
  MlaConfig mla;
  std::optional<MoeConfig> moe;  // nullopt: num_experts is null, every layer is dense

  std::vector<MixerKind> mixer;  // per layer, 0-based
  std::vector<FfnKind> ffn;      // per layer, 0-based
  TokenIds tokens;
  // The trained context length: max_position_embeddings, else model_max_length; nullopt when the
  // config gives neither. Informational for the NoPE model (spec §1); the CPU's default context limit.
  std::optional<int64_t> max_position_embeddings;

  bool is_kda(int64_t layer) const { return mixer.at(static_cast<size_t>(layer)) == MixerKind::kKda; }
  bool is_moe(int64_t layer) const { return ffn.at(static_cast<size_t>(layer)) == FfnKind::kMoe; }
  int64_t count(MixerKind kind) const;
  int64_t count(FfnKind kind) const;
};

// `root` is the whole config.json document.
K3Config parse_k3_config(const JsonNode& root);
K3Config load_k3_config(const std::string& path);

struct GenerationConfig {
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // eos_token_id: an integer or a list; empty when absent
  std::optional<int64_t> pad_token_id;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<int64_t> max_new_tokens;
  std::optional<int64_t> max_length;
};

GenerationConfig parse_generation_config(const JsonNode& root);
GenerationConfig load_generation_config(const std::string& path);

const char* to_string(MixerKind kind);
const char* to_string(FfnKind kind);

}  // namespace k3
