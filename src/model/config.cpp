#include "model/config.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "model/parameters.h"

namespace k3 {
namespace {

// The only fields that may be absent. Values are the defaults of the reference implementation
// (KimiLinearConfig.__init__ of the K3 release, whose field list spec §1 follows); each one turns a
// K3 feature off or keeps the Kimi-Linear behaviour, which is how Kimi-Linear configs written
// before those features (e.g. fixtures/kimi-linear-peer) are read by the reference. A present key
// with a null value is an error for these. Every other load-bearing field is required.
struct ReferenceDefaults {
  int64_t moe_layer_freq = 1;
  const char* moe_router_activation_func = "sigmoid";
  const char* topk_method = "noaux_tc";
  bool use_grouped_topk = true;
  int64_t num_nextn_predict_layers = 0;
  bool mla_use_output_gate = false;
  bool latent_moe_use_norm = false;
  bool use_full_rank_gate = false;  // linear_attn_config.use_full_rank_gate
};
constexpr ReferenceDefaults kReferenceDefaults;
// Nullable fields whose absence means null ("feature off"), as in the reference (spec §1):
// attn_res_block_size (plain residual), routed_expert_hidden_size (no latent MoE),
// activation_situ_beta (kSituBetaWhenNull), activation_situ_linear_beta (no cap),
// linear_attn_config.gate_lower_bound (softplus forget gate, spec §6.3).

std::string json_quoted(const std::string& text) { return Json(text).dump(-1, ' ', true); }

int64_t required_int(const JsonNode& node, std::string_view key, int64_t lo, int64_t hi) {
  return node.required_int(key, lo, hi);
}

// Present; null -> nullopt.
std::optional<int64_t> nullable_int(const JsonNode& node, std::string_view key, int64_t lo, int64_t hi) {
  JsonNode field = node.at(key);
  if (field.is_null()) return std::nullopt;
  return field.as_int_in(lo, hi);
}

// Absent or null -> nullopt.
int64_t defaulted_int(const JsonNode& node, std::string_view key, int64_t fallback, int64_t lo, int64_t hi) {
  std::optional<JsonNode> field = node.find(key);
  if (!field) return fallback;
  if (field->is_null()) field->fail("must not be null");
  return field->as_int_in(lo, hi);
}

// Some configs repeat a value under a second name (transformers 5 writes linear_num_heads next to
// linear_attn_config.num_heads). When present, the copy must agree.
void check_copy_agrees(const JsonNode& node, std::string_view key, int64_t expected, const std::string& source) {
  std::optional<JsonNode> field = node.find(key);
  if (!field || field->is_null()) return;
  int64_t value = field->as<int64_t>();
  if (value != expected) {
    field->fail("is " + std::to_string(value) + " but " + source + " is " + std::to_string(expected));
  }
}

ActivationConfig parse_activation(const JsonNode& text) {
  ActivationConfig act;
  std::string name = text.required<std::string>("hidden_act");
  if (name == "silu") {
    act.kind = Activation::kSilu;
  } else if (name == "situ") {
    act.kind = Activation::kSitu;
    if (std::optional<JsonNode> beta = text.find("activation_situ_beta"); beta && !beta->is_null()) {
      act.situ_beta = beta->as_double_in(kMinSituBeta, kMaxSituBeta);
    }
    if (std::optional<JsonNode> beta = text.find("activation_situ_linear_beta"); beta && !beta->is_null()) {
      act.situ_linear_beta = beta->as_double_in(kMinSituBeta, kMaxSituBeta);
    }
  } else {
    text.at("hidden_act").fail("unsupported activation " + json_quoted(name) + " (expected \"silu\" or \"situ\")");
  }
  return act;
}

KdaConfig parse_kda(const JsonNode& text, const JsonNode& linear) {
  KdaConfig kda;
  kda.num_heads = required_int(linear, "num_heads", 1, kMaxConfigDim);
  // The KDA value head dim is head_dim as well (spec §6: K = V). sglang reads the MLA field
  // v_head_dim instead (spec §12.7); that agrees for K3 but not for the kimi-linear-peer fixture,
  // whose KDA v_proj has num_heads·head_dim rows while v_head_dim differs.
  kda.head_dim = required_int(linear, "head_dim", 1, kMaxConfigDim);
  kda.short_conv_kernel_size = required_int(linear, "short_conv_kernel_size", 1, kMaxConfigDim);
  if (std::optional<JsonNode> bound = linear.find("gate_lower_bound"); bound && !bound->is_null()) {
    // g = LB·sigmoid(·) must be a log-decay (< 0), else the state grows without bound.
    if (!(bound->as<double>() < 0)) bound->fail("must be negative, got " + bound->value().dump());
    kda.gate_lower_bound = bound->as_double_in(kMinGateLowerBound, kMaxGateLowerBound);
  }
  kda.use_full_rank_gate = linear.optional<bool>("use_full_rank_gate", kReferenceDefaults.use_full_rank_gate);
  if (kda.projection_dim() > kMaxConfigDim) {
    linear.fail("num_heads × head_dim = " + std::to_string(kda.projection_dim()) + " exceeds " +
                std::to_string(kMaxConfigDim));
  }
  check_copy_agrees(text, "linear_num_heads", kda.num_heads, "linear_attn_config.num_heads");
  check_copy_agrees(text, "linear_head_dim", kda.head_dim, "linear_attn_config.head_dim");
  check_copy_agrees(text, "linear_conv_kernel_dim", kda.short_conv_kernel_size,
                    "linear_attn_config.short_conv_kernel_size");
  return kda;
}

MlaConfig parse_mla(const JsonNode& text) {
  MlaConfig mla;
  if (!text.required<bool>("mla_use_nope")) {
    text.at("mla_use_nope").fail("MLA with rotary embeddings is not supported (Kimi MLA is NoPE)");
  }
  // sglang would scale the softmax by a YaRN mscale when rope_scaling is set (spec §5); a NoPE model
  // has no use for it, so a set value means a config this engine does not understand.
  if (std::optional<JsonNode> scaling = text.find("rope_scaling"); scaling && !scaling->is_null()) {
    scaling->fail("must be null or absent: MLA here is NoPE and applies no rope scaling");
  }
  mla.num_heads = required_int(text, "num_attention_heads", 1, kMaxConfigDim);
  mla.q_lora_rank = nullable_int(text, "q_lora_rank", 1, kMaxConfigDim);
  mla.kv_lora_rank = required_int(text, "kv_lora_rank", 1, kMaxConfigDim);
  mla.qk_nope_head_dim = required_int(text, "qk_nope_head_dim", 1, kMaxConfigDim);
  mla.qk_rope_head_dim = required_int(text, "qk_rope_head_dim", 0, kMaxConfigDim);
  mla.v_head_dim = required_int(text, "v_head_dim", 1, kMaxConfigDim);
  mla.use_output_gate = text.optional<bool>("mla_use_output_gate", kReferenceDefaults.mla_use_output_gate);
  check_copy_agrees(text, "qk_head_dim", mla.qk_head_dim(), "qk_nope_head_dim + qk_rope_head_dim");
  return mla;
}

RouterScoring parse_scoring(const JsonNode& text) {
  std::string name = text.optional<std::string>("moe_router_activation_func",
                                                kReferenceDefaults.moe_router_activation_func);
  if (name == "sigmoid") return RouterScoring::kSigmoid;
  if (name == "softmax") return RouterScoring::kSoftmax;
  text.at("moe_router_activation_func")
      .fail("unsupported router scoring " + json_quoted(name) + " (expected \"sigmoid\" or \"softmax\")");
}

std::optional<MoeConfig> parse_moe(const JsonNode& text, int64_t num_layers, int64_t hidden_size) {
  std::optional<int64_t> num_experts = nullable_int(text, "num_experts", 1, kMaxConfigExperts);
  if (!num_experts) return std::nullopt;
  MoeConfig moe;
  moe.num_experts = *num_experts;
  moe.experts_per_token = required_int(text, "num_experts_per_token", 1, moe.num_experts);
  moe.num_shared_experts = required_int(text, "num_shared_experts", 0, kMaxConfigExperts);
  moe.moe_intermediate_size = required_int(text, "moe_intermediate_size", 1, kMaxConfigDim);
  moe.first_k_dense_replace = required_int(text, "first_k_dense_replace", 0, num_layers);
  moe.moe_layer_freq = defaulted_int(text, "moe_layer_freq", kReferenceDefaults.moe_layer_freq, 1, num_layers);
  moe.scoring = parse_scoring(text);
  moe.renormalize = text.required<bool>("moe_renormalize");
  moe.routed_scaling_factor = text.required_double("routed_scaling_factor", kMinRoutedScalingFactor, kMaxRoutedScalingFactor);
  moe.use_grouped_topk = text.optional<bool>("use_grouped_topk", kReferenceDefaults.use_grouped_topk);
  moe.num_expert_group = required_int(text, "num_expert_group", 1, moe.num_experts);
  moe.topk_group = required_int(text, "topk_group", 1, moe.num_expert_group);
  if (moe.num_experts % moe.num_expert_group != 0) {
    text.at("num_expert_group")
        .fail("must divide num_experts (" + std::to_string(moe.num_experts) + "), got " +
              std::to_string(moe.num_expert_group));
  }
  int64_t selectable = moe.topk_group * (moe.num_experts / moe.num_expert_group);
  if (moe.use_grouped_topk && moe.experts_per_token > selectable) {
    text.at("num_experts_per_token")
        .fail("is " + std::to_string(moe.experts_per_token) + " but topk_group " + std::to_string(moe.topk_group) +
              " groups hold only " + std::to_string(selectable) + " experts");
  }
  std::string topk_method = text.optional<std::string>("topk_method", kReferenceDefaults.topk_method);
  if (topk_method != "noaux_tc") {
    text.at("topk_method")
        .fail("unsupported " + json_quoted(topk_method) +
              " (the Kimi router always selects with e_score_correction_bias: \"noaux_tc\")");
  }
  moe.has_score_correction_bias = true;
  moe.routed_expert_hidden_size = text.optional_int("routed_expert_hidden_size", 1, hidden_size);
  moe.latent_moe_use_norm = text.optional<bool>("latent_moe_use_norm", kReferenceDefaults.latent_moe_use_norm);
  return moe;
}

// Layer kinds from the 1-based lists linear_attn_config.kda_layers / full_attn_layers (spec §1,
// §4): every layer number 1..num_layers in exactly one list.
std::vector<MixerKind> mixer_from_lists(const JsonNode& linear, int64_t num_layers) {
  struct ListSpec {
    const char* key;
    MixerKind kind;
  };
  constexpr ListSpec kLists[] = {{"kda_layers", MixerKind::kKda}, {"full_attn_layers", MixerKind::kMla}};
  std::vector<const char*> owner(static_cast<size_t>(num_layers), nullptr);
  std::vector<MixerKind> kinds(static_cast<size_t>(num_layers), MixerKind::kKda);
  const std::string range = "[1, " + std::to_string(num_layers) + "]";
  for (const ListSpec& list : kLists) {
    JsonNode field = linear.at(list.key);
    if (field.is_null()) field.fail("must not be null");
    for (const JsonNode& element : field.elements()) {
      int64_t number = element.as<int64_t>();
      if (number == 0) {
        element.fail("layer number 0 in a 1-based list (valid numbers are " + range +
                     "; was the list written 0-based?)");
      }
      if (number < 1 || number > num_layers) {
        element.fail("layer number " + std::to_string(number) + " is outside " + range + " (1-based)");
      }
      size_t index = static_cast<size_t>(number - 1);
      if (owner[index] == list.key) {
        element.fail("layer number " + std::to_string(number) + " is listed twice in " + list.key);
      }
      if (owner[index] != nullptr) {
        element.fail("layer number " + std::to_string(number) + " is listed in both " + owner[index] + " and " +
                     list.key);
      }
      owner[index] = list.key;
      kinds[index] = list.kind;
    }
  }
  for (size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] == nullptr) {
      linear.fail("layer number " + std::to_string(i + 1) + " (index " + std::to_string(i) +
                  ") is in neither kda_layers nor full_attn_layers");
    }
  }
  return kinds;
}

// layer_types (transformers 5 configs): one entry per 0-based layer.
std::vector<MixerKind> mixer_from_layer_types(const JsonNode& field, int64_t num_layers) {
  std::vector<JsonNode> entries = field.elements();
  if (static_cast<int64_t>(entries.size()) != num_layers) {
    field.fail("has " + std::to_string(entries.size()) + " entries but num_hidden_layers is " +
               std::to_string(num_layers));
  }
  std::vector<MixerKind> kinds;
  for (const JsonNode& entry : entries) {
    std::string name = entry.as<std::string>();
    if (name == "linear_attention") {
      kinds.push_back(MixerKind::kKda);
    } else if (name == "full_attention") {
      kinds.push_back(MixerKind::kMla);
    } else {
      entry.fail("unknown layer type " + json_quoted(name) + " (expected \"linear_attention\" or \"full_attention\")");
    }
  }
  return kinds;
}

std::vector<MixerKind> parse_mixer_kinds(const JsonNode& text, const JsonNode& linear, int64_t num_layers) {
  std::optional<JsonNode> types = text.find("layer_types");
  if (types && types->is_null()) types.reset();
  bool has_lists = linear.has("kda_layers") || linear.has("full_attn_layers");
  if (!has_lists && !types) {
    linear.fail("no layer kinds: need kda_layers and full_attn_layers (1-based), or a top-level layer_types");
  }
  if (!has_lists) return mixer_from_layer_types(*types, num_layers);
  std::vector<MixerKind> kinds = mixer_from_lists(linear, num_layers);
  if (types) {
    std::vector<MixerKind> typed = mixer_from_layer_types(*types, num_layers);
    for (size_t i = 0; i < kinds.size(); ++i) {
      if (typed[i] != kinds[i]) {
        types->elements()[i].fail("says " + std::string(to_string(typed[i])) + " but linear_attn_config lists layer number " +
                                  std::to_string(i + 1) + " as " + to_string(kinds[i]));
      }
    }
  }
  return kinds;
}

// Spec §4: MoE iff num_experts is set, idx >= first_k_dense_replace and idx % moe_layer_freq == 0.
// transformers 5 configs also write mlp_layer_types ("dense" / "sparse"); it must agree.
std::vector<FfnKind> parse_ffn_kinds(const JsonNode& text, const std::optional<MoeConfig>& moe, int64_t num_layers) {
  std::vector<FfnKind> kinds;
  for (int64_t i = 0; i < num_layers; ++i) {
    bool is_moe = moe && i >= moe->first_k_dense_replace && i % moe->moe_layer_freq == 0;
    kinds.push_back(is_moe ? FfnKind::kMoe : FfnKind::kDense);
  }
  std::optional<JsonNode> types = text.find("mlp_layer_types");
  if (!types || types->is_null()) return kinds;
  std::vector<JsonNode> entries = types->elements();
  if (static_cast<int64_t>(entries.size()) != num_layers) {
    types->fail("has " + std::to_string(entries.size()) + " entries but num_hidden_layers is " +
                std::to_string(num_layers));
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    std::string name = entries[i].as<std::string>();
    if (name != "dense" && name != "sparse") {
      entries[i].fail("unknown MLP layer type " + json_quoted(name) + " (expected \"dense\" or \"sparse\")");
    }
    FfnKind typed = name == "sparse" ? FfnKind::kMoe : FfnKind::kDense;
    if (typed != kinds[i]) {
      entries[i].fail("says " + name + " but num_experts / first_k_dense_replace / moe_layer_freq make layer " +
                      std::to_string(i) + " " + to_string(kinds[i]));
    }
  }
  return kinds;
}

std::optional<int64_t> token_id(const JsonNode& text, std::string_view key, int64_t vocab_size) {
  return text.optional_int(key, 0, vocab_size - 1);
}

TokenIds parse_token_ids(const JsonNode& text, int64_t vocab_size) {
  TokenIds ids;
  ids.bos = token_id(text, "bos_token_id", vocab_size);
  ids.pad = token_id(text, "pad_token_id", vocab_size);
  if (std::optional<JsonNode> eos = text.find("eos_token_id"); eos && !eos->is_null()) {
    ids.eos = eos->as_int_or_int_list();
    for (int64_t id : ids.eos) {
      if (id < 0 || id >= vocab_size) {
        eos->fail("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
      }
    }
  }
  return ids;
}

// Products of two fields that size a matrix, and the total parameter count (see kMaxConfigParameters).
void check_sizes(const JsonNode& text, const K3Config& c) {
  const auto bound = [&](std::string_view key, const std::string& what, int64_t value) {
    if (value > kMaxConfigDim) {
      text.at(key).fail(what + " = " + std::to_string(value) + " exceeds " + std::to_string(kMaxConfigDim));
    }
  };
  const MlaConfig& m = c.mla;
  bound("num_attention_heads", "num_attention_heads × (qk_nope_head_dim + qk_rope_head_dim)", m.num_heads * m.qk_head_dim());
  bound("num_attention_heads", "num_attention_heads × (qk_nope_head_dim + v_head_dim)",
        m.num_heads * (m.qk_nope_head_dim + m.v_head_dim));
  if (c.moe) {
    bound("num_shared_experts", "num_shared_experts × moe_intermediate_size", c.moe->shared_intermediate_size());
  }
  long double total = 0;
  for (const ParamSpec& spec : parameter_inventory(c)) {
    long double n = 1;
    for (uint64_t d : spec.shape) n *= static_cast<long double>(d);
    total += n;
  }
  if (total > static_cast<long double>(kMaxConfigParameters)) {
    char count[32];
    std::snprintf(count, sizeof count, "%.3Lg", total);
    text.fail(std::string("describes ") + count + " parameters, more than " + std::to_string(kMaxConfigParameters));
  }
}

}  // namespace

double MlaConfig::softmax_scale() const { return 1.0 / std::sqrt(static_cast<double>(qk_head_dim())); }

int64_t K3Config::count(MixerKind kind) const {
  int64_t n = 0;
  for (MixerKind k : mixer) n += k == kind;
  return n;
}

int64_t K3Config::count(FfnKind kind) const {
  int64_t n = 0;
  for (FfnKind k : ffn) n += k == kind;
  return n;
}

const char* to_string(MixerKind kind) { return kind == MixerKind::kKda ? "KDA" : "MLA"; }
const char* to_string(FfnKind kind) { return kind == FfnKind::kDense ? "dense" : "MoE"; }

K3Config parse_k3_config(const JsonNode& root) {
  K3Config config;
  config.file = root.file();
  std::string model_type = root.required<std::string>("model_type");
  JsonNode text = root;
  if (model_type == "kimi_k3") {
    config.model_type = ModelType::kKimiK3;
    text = root.object("text_config");
    std::string text_type = text.required<std::string>("model_type");
    if (text_type != "kimi_linear") {
      text.at("model_type").fail("unsupported text model type " + json_quoted(text_type) + " (expected \"kimi_linear\")");
    }
  } else if (model_type == "kimi_linear") {
    config.model_type = ModelType::kKimiLinear;
  } else {
    root.at("model_type").fail("unsupported model type " + json_quoted(model_type) +
                               " (expected \"kimi_linear\" or \"kimi_k3\")");
  }
  config.text_path = text.path();

  config.hidden_size = required_int(text, "hidden_size", 1, kMaxConfigDim);
  config.vocab_size = required_int(text, "vocab_size", 1, kMaxConfigDim);
  config.num_layers = required_int(text, "num_hidden_layers", 1, kMaxConfigLayers);
  config.intermediate_size = required_int(text, "intermediate_size", 1, kMaxConfigDim);
  config.rms_norm_eps = text.required_double("rms_norm_eps", kMinRmsNormEps, kMaxRmsNormEps);
  config.tie_word_embeddings = text.required<bool>("tie_word_embeddings");
  config.num_nextn_predict_layers = defaulted_int(text, "num_nextn_predict_layers",
                                                  kReferenceDefaults.num_nextn_predict_layers, 0, kMaxConfigLayers);
  config.activation = parse_activation(text);
  config.attn_res_block_size = text.optional_int("attn_res_block_size", 1, config.num_layers);

  JsonNode linear = text.object("linear_attn_config");
  config.kda = parse_kda(text, linear);
  config.mla = parse_mla(text);
  config.moe = parse_moe(text, config.num_layers, config.hidden_size);
  config.mixer = parse_mixer_kinds(text, linear, config.num_layers);
  config.ffn = parse_ffn_kinds(text, config.moe, config.num_layers);
  config.tokens = parse_token_ids(text, config.vocab_size);
  config.max_position_embeddings = text.optional_int("max_position_embeddings", 1, kMaxConfigContext);
  if (!config.max_position_embeddings) {
    config.max_position_embeddings = text.optional_int("model_max_length", 1, kMaxConfigContext);
  }
  check_sizes(text, config);
  return config;
}

K3Config load_k3_config(const std::string& path) { return parse_k3_config(load_json_file(path)); }

GenerationConfig parse_generation_config(const JsonNode& root) {
  root.as_object();
  GenerationConfig gen;
  constexpr int64_t kMaxId = std::numeric_limits<int64_t>::max();
  gen.bos_token_id = root.optional_int("bos_token_id", 0, kMaxId);
  gen.pad_token_id = root.optional_int("pad_token_id", 0, kMaxId);
  if (std::optional<JsonNode> eos = root.find("eos_token_id"); eos && !eos->is_null()) {
    gen.eos_token_ids = eos->as_int_or_int_list();
    for (int64_t id : gen.eos_token_ids) {
      if (id < 0) eos->fail("token id " + std::to_string(id) + " is negative");
    }
  }
  gen.do_sample = root.optional<bool>("do_sample");
  if (std::optional<JsonNode> t = root.find("temperature"); t && !t->is_null()) {
    gen.temperature = t->as_double_in(0, kMaxGenerationTemperature);
  }
  if (std::optional<JsonNode> p = root.find("top_p"); p && !p->is_null()) {
    gen.top_p = p->as<double>();
    if (!(*gen.top_p > 0 && *gen.top_p <= 1)) p->fail("must be in (0, 1], got " + p->value().dump());
  }
  gen.top_k = root.optional_int("top_k", 0, kMaxId);
  gen.max_new_tokens = root.optional_int("max_new_tokens", 1, kMaxId);
  gen.max_length = root.optional_int("max_length", 1, kMaxId);
  return gen;
}

GenerationConfig load_generation_config(const std::string& path) {
  return parse_generation_config(load_json_file(path));
}

}  // namespace k3
