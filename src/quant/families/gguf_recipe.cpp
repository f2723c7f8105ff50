#include "quant/families/gguf_recipe.h"

#include <optional>

#include "core/error.h"

namespace k3 {
namespace {

struct RecipeName {
  GgufRecipe recipe;
  const char* name;
};
constexpr RecipeName kRecipes[] = {
    {GgufRecipe::kDefault, "default"},
    {GgufRecipe::kQ4KM, "q4_k_m"},
    {GgufRecipe::kQ2KExperts, "q2_k_experts"},
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_down(const ParamSpec& s) { return ends_with(s.name, "down_proj.weight") || ends_with(s.name, "w2.weight"); }
bool is_gate_or_up(const ParamSpec& s) { return ends_with(s.name, "w1.weight") || ends_with(s.name, "w3.weight"); }
// Tensors llama.cpp stores as they are: norms, vectors, convs and the router.
bool stays_f32(const ParamSpec& s) {
  return s.kind == ParamKind::Vector || s.kind == ParamKind::Conv || s.group == ParamGroup::Router;
}
// KDA's small gate projections, kept in float by every recipe (docs/decisions/gguf-quantize-recipes.md).
std::optional<GgmlType> kda_gate_type(const ParamSpec& s) {
  if (ends_with(s.name, "self_attn.b_proj.weight") && s.group == ParamGroup::Kda) return GgmlType::F16;
  if (ends_with(s.name, "f_a_proj.weight") || ends_with(s.name, "f_b_proj.weight")) return GgmlType::BF16;
  return std::nullopt;
}

// make-tiny's mix (docs/decisions/gguf-make-tiny-types.md).
GgmlType default_type(const ParamSpec& spec, bool pack) {
  if (stays_f32(spec)) return GgmlType::F32;
  const uint64_t k = spec.shape.back();
  const bool k256 = k % 256 == 0;
  const bool down = is_down(spec) || ends_with(spec.name, "o_proj.weight");
  if (spec.kind == ParamKind::ExpertBank) {
    if (pack) return down ? GgmlType::Q3_K : GgmlType::Q2_K;
    return k256 ? (down ? GgmlType::Q6_K : GgmlType::Q4_K) : GgmlType::Q4_0;
  }
  if (const auto t = kda_gate_type(spec)) return *t;
  if (!k256) return k % 32 == 0 ? GgmlType::Q8_0 : GgmlType::F16;
  if (spec.group == ParamGroup::Head || down) return GgmlType::Q6_K;
  if (spec.group == ParamGroup::DenseMlp) return GgmlType::Q2_K;
  if (spec.group == ParamGroup::Shared) return GgmlType::Q3_K;
  return GgmlType::Q4_K;
}

// llama.cpp's use_more_bits(i, n): the first and last eighth, and every third one between.
bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama.cpp counts attn_v tensors in layer order; every Kimi layer has one attn_v-like tensor
// (KDA v_proj or MLA kv_b), so its index is the layer's.
bool is_attn_v_like(const ParamSpec& s) {
  return ends_with(s.name, "self_attn.v_proj.weight") || ends_with(s.name, "self_attn.kv_b_proj.weight");
}

// llama.cpp's fallback for rows that do not tile its block: Q4_K → Q5_0, Q6_K → Q8_0 (32-blocks),
// F16 when even 32 does not divide them.
GgmlType fit_rows(GgmlType t, uint64_t k) {
  if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) return t;
  const uint64_t block = ggml_type_info(t).block_size;
  if (k % block == 0) return t;
  if (k % 32 != 0) return GgmlType::F16;
  return t == GgmlType::Q6_K || t == GgmlType::Q8_0 ? GgmlType::Q8_0 : t == GgmlType::Q4_K ? GgmlType::Q5_0 : GgmlType::Q4_0;
}

GgmlType q4_k_m_type(const ParamSpec& spec, const K3Config& c, bool pack) {
  if (stays_f32(spec)) return GgmlType::F32;
  if (spec.kind == ParamKind::ExpertBank && pack) return default_type(spec, true);
  if (const auto t = kda_gate_type(spec)) return *t;
  GgmlType t = GgmlType::Q4_K;
  if (spec.group == ParamGroup::Head) {
    t = GgmlType::Q6_K;
  } else if (is_attn_v_like(spec)) {
    if (use_more_bits(spec.layer, c.num_layers)) t = GgmlType::Q6_K;
  } else if (is_down(spec) && spec.group != ParamGroup::Latent) {
    if (use_more_bits(spec.layer, c.num_layers)) t = GgmlType::Q6_K;
  }
  return fit_rows(t, spec.shape.back());
}

GgmlType q2_k_experts_type(const ParamSpec& spec, const K3Config&, bool pack) {
  if (spec.kind != ParamKind::ExpertBank) return default_type(spec, pack);
  return fit_rows(is_gate_or_up(spec) ? GgmlType::Q2_K : GgmlType::Q3_K, spec.shape.back());
}

}  // namespace

GgufRecipe parse_gguf_recipe(const std::string& name) {
  for (const auto& r : kRecipes) {
    if (name == r.name) return r.recipe;
  }
  std::string known;
  for (const auto& r : kRecipes) known += std::string(known.empty() ? "" : ", ") + r.name;
  throw Error(Where{"", "", "--recipe"}, "unknown recipe '" + name + "' (expected one of " + known + ")");
}

const char* gguf_recipe_name(GgufRecipe recipe) {
  for (const auto& r : kRecipes) {
    if (r.recipe == recipe) return r.name;
  }
  return "?";
}

std::vector<std::string> gguf_recipe_names() {
  std::vector<std::string> out;
  for (const auto& r : kRecipes) out.push_back(r.name);
  return out;
}

GgmlType gguf_recipe_type(GgufRecipe recipe, const ParamSpec& spec, const K3Config& config, bool expert_pack) {
  switch (recipe) {
    case GgufRecipe::kDefault: return default_type(spec, expert_pack);
    case GgufRecipe::kQ4KM: return q4_k_m_type(spec, config, expert_pack);
    case GgufRecipe::kQ2KExperts: return q2_k_experts_type(spec, config, expert_pack);
  }
  return default_type(spec, expert_pack);
}

}  // namespace k3
