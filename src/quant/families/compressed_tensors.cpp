// compressed-tensors family: planning (MXFP4 pack-quantized and FP8-block) and the make-tiny
// writer of the native Kimi-K3 release layout.
#include "quant/families/compressed_tensors.h"

#include "quant/families/checkpoint_writer.h"
#include "quant/families/family.h"
#include "quant/families/fp8_block.h"
#include "quant/formats/fp8/fp8_plan.h"
#include "quant/formats/mxfp4/mxfp4.h"
#include "quant/formats/mxfp4/mxfp4_plan.h"
#include "model/tiny_config.h"

namespace k3 {
namespace {

constexpr const char* kCtMixedPrecision = "mixed-precision";

std::string quoted(const std::optional<std::string>& s) { return s ? "'" + *s + "'" : "none"; }

}  // namespace

CtModuleRules::CtModuleRules(const CompressedTensorsConfig& c) {
  const auto where = [&c](const std::string& key) { return Where{c.origin.file, "", c.origin.path + "." + key}; };
  const auto require = [&where](bool ok, const std::string& key, const std::string& message) {
    if (!ok) throw Error(where(key), message);
  };
  const auto target = [&where](const std::string& text, const std::string& key) {
    Target t{text, std::nullopt};
    if (text.rfind("re:", 0) == 0) {
      try {
        t.regex.emplace(text.substr(3), std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw Error(where(key), "invalid regular expression '" + text + "': " + e.what());
      }
    }
    return t;
  };

  if (c.quantization_status) {
    require(*c.quantization_status == "compressed", "quantization_status",
            "unsupported quantization_status '" + *c.quantization_status + "' (expected 'compressed')");
  }
  require(!c.config_groups.empty(), "config_groups", "no config group");
  for (const auto& g : c.config_groups) {
    const std::string key = "config_groups." + g.name;
    // The top-level format describes every group unless it is "mixed-precision"; a group that
    // names another one contradicts it, and which one the writer meant is unknowable.
    if (g.format && c.format && *c.format != kCtMixedPrecision && *g.format != *c.format) {
      throw Error(where(key + ".format"), "config group format '" + *g.format + "' contradicts the top-level format '" +
                                              *c.format + "' (only a 'mixed-precision' top-level format allows per-group formats)");
    }
    const std::optional<std::string> format = g.format ? g.format : c.format;
    require(format.has_value(), key + ".format", "config group has no format (and the config has no top-level one)");
    require(g.weights.has_value(), key + ".weights", "config group quantizes no weights");
    const CtQuantArgs& w = *g.weights;
    const std::string wkey = key + ".weights";
    require(w.type == "float", wkey + ".type", "unsupported weights.type '" + w.type + "' for " + *format + " (expected 'float')");
    require(w.symmetric, wkey + ".symmetric", "asymmetric weights are not supported");
    require(!g.input_activations || g.input_activations->dynamic != CtDynamic::kStatic, key + ".input_activations.dynamic",
            "static input activation scales are not supported (activations are quantized dynamically)");
    Group group;
    if (*format == "mxfp4-pack-quantized") {
      require(w.num_bits == 4, wkey + ".num_bits", "mxfp4-pack-quantized needs weights.num_bits 4, got " + std::to_string(w.num_bits));
      require(w.strategy == "group", wkey + ".strategy",
              "unsupported weights.strategy " + quoted(w.strategy) + " for mxfp4-pack-quantized (expected 'group')");
      require(w.group_size == kMxfp4Group, wkey + ".group_size",
              "mxfp4-pack-quantized needs weights.group_size 32, got " + (w.group_size ? std::to_string(*w.group_size) : "none"));
      require(!w.scale_dtype || *w.scale_dtype == "torch.uint8", wkey + ".scale_dtype",
              "mxfp4-pack-quantized needs weights.scale_dtype 'torch.uint8' (E8M0), got " + quoted(w.scale_dtype));
      group.layout = mxfp4_layout();
    } else if (*format == "float-quantized") {
      require(w.num_bits == 8, wkey + ".num_bits", "float-quantized needs weights.num_bits 8, got " + std::to_string(w.num_bits));
      require(w.strategy == "block", wkey + ".strategy",
              "unsupported weights.strategy " + quoted(w.strategy) + " for float-quantized (supported: 'block')");
      require(w.block_structure.has_value(), wkey + ".block_structure", "strategy 'block' needs weights.block_structure");
      // vLLM CompressedTensorsW8A8Fp8 (strategy BLOCK): `weight` F8_E4M3 [N, K] and `weight_scale`
      // [cdiv(N, block_n), cdiv(K, block_k)], a dequant multiplier like DeepSeek's weight_scale_inv.
      group.layout = fp8_block_layout(static_cast<uint32_t>((*w.block_structure)[0]),
                                      static_cast<uint32_t>((*w.block_structure)[1]), "weight_scale");
    } else {
      throw Error(where(g.format ? key + ".format" : "format"),
                  "unsupported compressed-tensors format '" + *format + "' (supported: mxfp4-pack-quantized, float-quantized)");
    }
    for (size_t i = 0; i < g.targets.size(); ++i) group.targets.push_back(target(g.targets[i], key + ".targets[" + std::to_string(i) + "]"));
    groups_.push_back(std::move(group));
  }
  for (size_t i = 0; i < c.ignore.size(); ++i) ignore_.push_back(target(c.ignore[i], "ignore[" + std::to_string(i) + "]"));
}

// 0: exact name, 1: regex from the start of the name, 2: the class "Linear"; -1: no match.
int CtModuleRules::match_rank(const Target& t, const std::string& module) {
  if (t.regex) return std::regex_search(module, *t.regex, std::regex_constants::match_continuous) ? 1 : -1;
  if (t.text == module) return 0;
  return t.text == "Linear" ? 2 : -1;
}

ModuleRule CtModuleRules::rule(const std::string& module) const {
  const Group* best = nullptr;
  int best_rank = 3;
  for (const auto& g : groups_) {
    for (const auto& t : g.targets) {
      const int rank = match_rank(t, module);
      if (rank >= 0 && rank < best_rank) {
        best_rank = rank;
        best = &g;
      }
    }
  }
  if (best == nullptr) return {groups_.front().layout, "targeted by no config group"};
  for (const auto& t : ignore_) {
    if (match_rank(t, module) >= 0) return {best->layout, "ignored by '" + t.text + "'"};
  }
  return {best->layout, ""};
}

Json ct_mxfp4_release_quantization_config() {
  const Json weights = {{"actorder", nullptr},   {"block_structure", nullptr}, {"dynamic", false},
                        {"group_size", 32},      {"num_bits", 4},              {"observer", "minmax"},
                        {"observer_kwargs", Json::object()}, {"scale_dtype", "torch.uint8"}, {"strategy", "group"},
                        {"symmetric", true},     {"type", "float"},            {"zp_dtype", nullptr}};
  const Json group = {{"format", "mxfp4-pack-quantized"}, {"input_activations", nullptr}, {"output_activations", nullptr},
                      {"targets", Json::array({"Linear"})}, {"weights", weights}};
  return {{"config_groups", {{"group_0", group}}},
          {"format", "mxfp4-pack-quantized"},
          {"global_compression_ratio", nullptr},
          {"ignore", Json::array({"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                                  "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"})},
          {"kv_cache_scheme", nullptr},
          {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"}};
}

bool ct_mxfp4_release_packs(const ParamSpec& spec) { return spec.kind == ParamKind::ExpertBank; }

Json ct_fp8_block_quantization_config() {
  const Json weights = {{"actorder", nullptr},  {"block_structure", Json::array({kFp8BlockSize, kFp8BlockSize})},
                        {"dynamic", false},     {"group_size", nullptr},
                        {"num_bits", 8},        {"observer", "minmax"},
                        {"observer_kwargs", Json::object()}, {"strategy", "block"},
                        {"symmetric", true},    {"type", "float"}};
  const Json inputs = {{"actorder", nullptr}, {"block_structure", nullptr}, {"dynamic", true},  {"group_size", 128},
                       {"num_bits", 8},        {"observer", nullptr},       {"observer_kwargs", Json::object()},
                       {"strategy", "group"},  {"symmetric", true},         {"type", "float"}};
  const Json group = {{"format", "float-quantized"}, {"input_activations", inputs}, {"output_activations", nullptr},
                      {"targets", Json::array({"Linear"})}, {"weights", weights}};
  return {{"config_groups", {{"group_0", group}}},
          {"format", "float-quantized"},
          {"global_compression_ratio", nullptr},
          {"ignore", Json::array({"re:.*lm_head$", "re:.*block_sparse_moe\\.gate$"})},
          {"kv_cache_scheme", nullptr},
          {"quant_method", "compressed-tensors"},
          {"quantization_status", "compressed"}};
}

namespace family {

LoadPlan plan_compressed_tensors(const CheckpointDir& ckpt) {
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "missing config.json");
  const std::optional<InlineQuantConfig> q = parse_inline_quant_config(*ckpt.config_json);
  const auto* ct = q ? std::get_if<CompressedTensorsConfig>(&*q) : nullptr;
  if (ct == nullptr) throw Error(Where{ckpt.path("config.json"), "", ""}, "no compressed-tensors quantization_config");
  const CtModuleRules rules(*ct);

  LoadPlan plan;
  plan.family = family_name(ckpt.family);
  // The config format can target any Linear, and the K3 release's config does not ignore the
  // latent projections: the plan binds them quantized when the checkpoint stores them so.
  plan.caps.quantized_latent_projections = true;
  const SafetensorsCheckpoint st = SafetensorsCheckpoint::open(ckpt.dir);
  TensorBinder binder(st, plan);
  plan.params = parameter_inventory(*ckpt.config);
  const ModuleRuleFn rule = [&rules](const std::string& module) { return rules.rule(module); };
  for (const auto& spec : plan.params) {
    Binding b = bind_linear_or_dense(binder, spec, rule);
    add_fp8_block_load_transforms(b);
    plan.bindings.push_back(std::move(b));
  }
  binder.finish();
  return plan;
}

WritePlan write_plan_compressed_tensors_mxfp4(const FloatSource& source, Json config_doc) {
  text_config_of(config_doc)["quantization_config"] = ct_mxfp4_release_quantization_config();
  SafetensorsPlanBuilder out(source);
  for (const auto& spec : source.params()) {
    if (!ct_mxfp4_release_packs(spec)) {
      out.add_unquantized(spec, Dtype::BF16);
      continue;
    }
    const uint64_t n = spec.shape[1], k = spec.shape[2];
    for (uint64_t e = 0; e < spec.shape[0]; ++e) {
      const int64_t ex = static_cast<int64_t>(e);
      const std::vector<size_t> ids = {out.declare(expert_tensor_name(spec.name, ex, "weight_packed"), Dtype::U8, {n, k / 2}),
                                       out.declare(expert_tensor_name(spec.name, ex, "weight_scale"), Dtype::U8, {n, k / kMxfp4Group})};
      out.add_unit(unit_label(spec, ex), "MXFP4", ids, [&source, spec, ex, n, k] {
        const std::vector<float> w = source.read(spec, ex);
        std::vector<uint8_t> packed(n * k / 2), scales(n * k / kMxfp4Group);
        quantize_mxfp4(w.data(), static_cast<int64_t>(n), static_cast<int64_t>(k), packed.data(), scales.data());
        return payloads(std::move(packed), std::move(scales));
      });
    }
  }
  return out.build(std::move(config_doc));
}

}  // namespace family
}  // namespace k3
