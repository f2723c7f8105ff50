// ModelOpt checkpoints (spec k3-quant-formats.md §2–§3): MIXED_PRECISION (NVFP4 routed experts +
// FP8_PB_WO attention, the published K3 recipe) and the single-algo NVFP4 / FP8 exports.
// Planning resolves every parameter's module through modelopt_resolve (exclusion first, then the
// algo), binds it with that algo's tensor layout, and reports module-name drift: a quantization
// tensor of a module that resolves to no algo is a problem, never loaded as BF16.
#include "quant/families/modelopt.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <variant>

#include "quant/families/checkpoint_writer.h"
#include "quant/families/family_writer.h"
#include "quant/families/family.h"
#include "quant/families/modelopt_resolve.h"
#include "quant/families/tensor_binder.h"
#include "quant/formats/fp8/fp8.h"
#include "quant/formats/fp8/fp8_plan.h"
#include "quant/formats/nvfp4/nvfp4.h"
#include "quant/formats/nvfp4/nvfp4_plan.h"

namespace k3 {
namespace modelopt {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string leaf_of(const std::string& module) { return module.substr(module.rfind('.') + 1); }

}  // namespace

bool dequantized_at_load(const std::string& param) {
  if (!ends_with(param, ".weight")) return false;
  const std::string leaf = leaf_of(param.substr(0, param.size() - 7));
  return param.find(".self_attn.") != std::string::npos &&
         (leaf == "f_a_proj" || leaf == "f_b_proj" || leaf == "b_proj" || leaf == "kv_b_proj");
}

bool never_quantized(const ParamSpec& spec) {
  if (spec.kind != ParamKind::Linear && spec.kind != ParamKind::ExpertBank) return true;
  return spec.group == ParamGroup::Router || spec.group == ParamGroup::Latent || spec.group == ParamGroup::Head;
}

}  // namespace modelopt

namespace family {
namespace {

using modelopt::Resolver;

constexpr uint32_t kFp8Block = 128;

// The module a parameter belongs to: "<…>.q_proj" for "<…>.q_proj.weight"; the bank
// "<…>.experts" for an expert bank "<…>.experts.w1.weight".
std::string module_of(const ParamSpec& spec) {
  const std::string m = spec.name.substr(0, spec.name.size() - 7);  // drop ".weight"
  return spec.kind == ParamKind::ExpertBank ? m.substr(0, m.rfind('.')) : m;
}

// Logical name of one stored tensor of unit `unit` (expert index, or -1 for a plain linear).
std::string unit_tensor(const ParamSpec& spec, int64_t unit, const std::string& role) {
  if (spec.kind == ParamKind::ExpertBank) return expert_tensor_name(spec.name, unit, role);
  return spec.name.substr(0, spec.name.size() - 7) + "." + role;
}

int64_t unit_count(const ParamSpec& spec) { return spec.kind == ParamKind::ExpertBank ? static_cast<int64_t>(spec.shape[0]) : 1; }

const char* const kQuantRoles[] = {"weight_scale", "weight_scale_2", "input_scale", "weight_scale_inv"};

// ---- configuration ----------------------------------------------------------------------------

struct Config {
  ModelOptConfig cfg;
  std::string algo;          // upper-cased top-level quant_algo
  std::string layers_field;  // key path of quantized_layers in its file
};

std::string section_path(const ModelOptConfig& cfg) { return cfg.inline_form ? cfg.origin.path : "quantization"; }

// The flat config.json form when it is complete, else hf_quant_config.json (spec §2.1: an inline
// MIXED_PRECISION config without quantized_layers defers to hf_quant_config.json).
Config load_config(const CheckpointDir& ckpt) {
  std::optional<ModelOptConfig> inline_cfg;
  if (ckpt.config_json) {
    if (auto q = parse_inline_quant_config(*ckpt.config_json)) {
      if (auto* m = std::get_if<ModelOptConfig>(&*q)) inline_cfg = *m;
    }
  }
  Config c;
  const bool inline_complete =
      inline_cfg && (modelopt::upper(inline_cfg->quant_algo) != "MIXED_PRECISION" || inline_cfg->quantized_layers);
  if (inline_complete || (inline_cfg && !ckpt.has_file("hf_quant_config.json"))) {
    c.cfg = *inline_cfg;
  } else if (ckpt.has_file("hf_quant_config.json")) {
    c.cfg = load_modelopt_hf_quant_config(ckpt.path("hf_quant_config.json"));
  } else {
    throw Error(Where{ckpt.dir, "", ""}, "no ModelOpt quantization config (config.json quantization_config or hf_quant_config.json)");
  }
  c.algo = modelopt::upper(c.cfg.quant_algo);
  c.layers_field = section_path(c.cfg) + ".quantized_layers";
  const Where algo_where{c.cfg.origin.file, "", section_path(c.cfg) + ".quant_algo"};
  if (c.algo != "MIXED_PRECISION" && c.algo != "NVFP4" && c.algo != "FP8") {
    throw Error(algo_where, "unknown ModelOpt quant_algo '" + c.cfg.quant_algo + "' (expected MIXED_PRECISION, NVFP4 or FP8)");
  }
  if (c.algo == "MIXED_PRECISION" && (!c.cfg.quantized_layers || c.cfg.quantized_layers->empty())) {
    throw Error(Where{c.cfg.origin.file, "", c.layers_field}, "MIXED_PRECISION needs a non-empty quantized_layers");
  }
  return c;
}

FamilyId variant_of(const std::string& algo) {
  if (algo == "MIXED_PRECISION") return FamilyId::ModelOptMixed;
  return algo == "NVFP4" ? FamilyId::ModelOptNvfp4 : FamilyId::ModelOptFp8;
}

// ---- binding ----------------------------------------------------------------------------------

// The stored tensors of a quantized unit [n, k] (each with one dtype).
std::vector<PartLayout> layout_of(const std::string& algo, uint64_t n, uint64_t k) {
  const auto cdiv = [](uint64_t a, uint64_t b) { return (a + b - 1) / b; };
  if (algo == "NVFP4") return nvfp4_parts(n, k);
  if (algo == "FP8_PB_WO") {
    // ModelOpt stores the block scale 4-D, [N/128, 1, K/128, 1], or 2-D.
    const uint64_t nb = cdiv(n, kFp8Block), kb = cdiv(k, kFp8Block);
    return {{"weight", {"F8_E4M3"}, {{n, k}}}, {"weight_scale", {"F32"}, {{nb, 1, kb, 1}, {nb, kb}}}};
  }
  return fp8_tensor_parts(n, k);
}

Scheme scheme_of(const std::string& algo) {
  if (algo == "NVFP4") return nvfp4_scheme();
  if (algo == "FP8_PB_WO") return fp8_block_scheme(kFp8Block, kFp8Block);
  return fp8_tensor_scheme();
}

class Planner {
 public:
  Planner(const Config& config, TensorBinder& binder)
      : config_(config),
        binder_(binder),
        resolver_(config.cfg.quantized_layers.value_or(std::vector<ModelOptLayer>{}), config.cfg.exclude_modules) {}

  void check_entries() {
    if (!config_.cfg.quantized_layers) return;
    for (const ModelOptLayer& layer : *config_.cfg.quantized_layers) {
      if (modelopt::known_algo(layer.quant_algo)) continue;
      config_problem(config_.layers_field + "[\"" + layer.module + "\"].quant_algo",
                     "unknown quant_algo '" + layer.quant_algo + "' (expected " + modelopt::known_algos_text() + ")");
    }
  }

  Binding bind(const ParamSpec& spec) {
    const std::string module = module_of(spec);
    if (modelopt::never_quantized(spec)) return bind_unquantized(spec, module, "never quantized by ModelOpt");
    if (resolver_.excluded(module)) return bind_unquantized(spec, module, "excluded by exclude_modules");
    std::optional<std::string> algo;
    if (config_.algo != "MIXED_PRECISION") {
      algo = config_.algo;
    } else {
      try {
        algo = resolver_.resolve(module);
      } catch (const Error& e) {
        config_problem(config_.layers_field, e.detail());
        return consume_module(spec);
      }
    }
    if (!algo) return bind_unquantized(spec, module, "resolves to no quant_algo");
    if (!modelopt::known_algo(*algo)) return consume_module(spec);  // the entry is reported by check_entries
    if (*algo != "NVFP4" && *algo != "FP8_PB_WO" && *algo != "FP8") {
      binder_.problem_for_param(spec.name, "quant_algo " + *algo + " of module '" + module + "' is not supported by k3");
      return consume_module(spec);
    }
    return bind_quantized(spec, *algo);
  }

  // Fused runtime modules must resolve to one algo and be excluded all or none (spec §2.2).
  void check_fused(const std::vector<ParamSpec>& params) {
    std::vector<std::pair<std::string, std::vector<std::string>>> bases;  // base -> linear leaves
    for (const ParamSpec& spec : params) {
      if (spec.kind != ParamKind::Linear || modelopt::never_quantized(spec)) continue;
      const std::string module = module_of(spec);
      const std::string base = module.substr(0, module.rfind('.'));
      auto it = std::find_if(bases.begin(), bases.end(), [&](const auto& b) { return b.first == base; });
      if (it == bases.end()) it = bases.insert(bases.end(), {base, {}});
      it->second.push_back(module.substr(base.size() + 1));
    }
    for (const auto& [base, leaves] : bases) {
      for (const modelopt::PackedModule& packed : modelopt::k3_packed_modules()) {
        std::vector<std::string> present;
        for (const std::string& shard : packed.shards) {
          if (std::find(leaves.begin(), leaves.end(), shard) != leaves.end()) present.push_back(shard);
        }
        if (present.empty()) continue;
        try {
          resolver_.check_fused(base, packed, present);
        } catch (const Error& e) {
          config_problem(config_.layers_field, e.detail());
        }
      }
    }
  }

 private:
  // Config problems are reported once, however many parameters meet them.
  void config_problem(const std::string& field, const std::string& message) {
    const Problem p{Where{config_.cfg.origin.file, "", field}, message};
    auto& problems = binder_.plan().problems;
    if (std::none_of(problems.begin(), problems.end(), [&](const Problem& q) { return q.text() == p.text(); })) problems.push_back(p);
  }

  // A dense binding; a quantization tensor left for the module is module-name drift.
  Binding bind_unquantized(const ParamSpec& spec, const std::string& module, const std::string& reason) {
    Binding b = bind_dense(binder_, spec);
    for (int64_t u = 0; u < unit_count(spec); ++u) {
      for (const char* role : kQuantRoles) {
        if (auto t = binder_.take_if_present(unit_tensor(spec, u, role))) {
          binder_.problem(*t, "", "module '" + module + "' is unquantized (" + reason + ") but the checkpoint has its " + role +
                                      ": module-name drift, not loaded as BF16");
        }
      }
    }
    return b;
  }

  // Takes every tensor of a module whose algo is unusable (already reported) so nothing cascades.
  Binding consume_module(const ParamSpec& spec) {
    Binding b{spec.name, Scheme{SchemeKind::Dense, ""}, {}, {}};
    for (int64_t u = 0; u < unit_count(spec); ++u) {
      for (const std::string role : {"weight", "weight_scale", "weight_scale_2", "input_scale", "weight_scale_inv"}) {
        binder_.take_if_present(unit_tensor(spec, u, role));
      }
    }
    return b;
  }

  std::optional<SourceTensor> take_part(const ParamSpec& spec, int64_t unit, const std::string& role) {
    if (auto t = binder_.take_if_present(unit_tensor(spec, unit, role))) return t;
    // FP8 block scales may also be stored under sglang's runtime name (spec §2.4 contract).
    if (role == "weight_scale") {
      if (auto t = binder_.take_if_present(unit_tensor(spec, unit, "weight_scale_inv"))) return t;
    }
    binder_.problem_for_param(spec.name, "missing tensor '" + unit_tensor(spec, unit, role) + "'");
    return std::nullopt;
  }

  void check_part(const ParamSpec& spec, const std::string& algo, const PartLayout& want, const SourceTensor& t) {
    const std::string what = " (" + algo + " " + want.role + " of parameter '" + spec.name + "')";
    if (t.dtype != want.dtypes.front()) binder_.problem(t, "dtype", "dtype " + t.dtype + " is not " + want.dtypes.front() + what);
    if (std::find(want.shapes.begin(), want.shapes.end(), t.shape) == want.shapes.end()) {
      std::string allowed;
      for (const auto& s : want.shapes) allowed += (allowed.empty() ? "" : " or ") + shape_string(s);
      binder_.problem(t, "shape", "shape " + shape_string(t.shape) + " is not " + allowed + what);
    }
  }

  Binding bind_quantized(const ParamSpec& spec, const std::string& algo) {
    const uint64_t n = spec.shape[spec.shape.size() - 2], k = spec.shape.back();
    Binding b{spec.name, scheme_of(algo), {}, {}};
    if (algo == "NVFP4") {
      const std::optional<int64_t> group = group_size(spec);
      if (group.value_or(kNvfp4Group) != kNvfp4Group) {
        binder_.problem_for_param(spec.name, "NVFP4 group_size " + std::to_string(*group) + " is not supported (ModelOpt NVFP4 uses 16)");
      }
    }
    for (const std::string& problem : shape_problems(b.scheme, n, k)) binder_.problem_for_param(spec.name, problem);
    const std::vector<PartLayout> layout = layout_of(algo, n, k);
    for (const PartLayout& part : layout) b.parts.push_back({part.role, {}});
    bool scale_4d = false;
    for (int64_t u = 0; u < unit_count(spec); ++u) {
      for (size_t i = 0; i < layout.size(); ++i) {
        auto t = take_part(spec, u, layout[i].role);
        if (!t) continue;
        check_part(spec, algo, layout[i], *t);
        scale_4d |= algo == "FP8_PB_WO" && layout[i].role == "weight_scale" && t->shape.size() == 4;
        b.parts[i].tensors.push_back(*t);
      }
    }
    if (scale_4d) b.transforms.push_back(Transform::SqueezeScale4D);
    if (algo == "FP8_PB_WO" && modelopt::dequantized_at_load(spec.name)) b.transforms.push_back(Transform::DequantToBf16);
    return b;
  }

  // NVFP4 group size: the module's own entry, else the config's, else 16.
  std::optional<int64_t> group_size(const ParamSpec& spec) const {
    if (config_.cfg.quantized_layers) {
      const std::vector<std::string> names = modelopt::module_spellings(module_of(spec));
      for (const ModelOptLayer& layer : *config_.cfg.quantized_layers) {
        if (layer.group_size && std::find(names.begin(), names.end(), layer.module) != names.end()) return layer.group_size;
      }
    }
    return config_.cfg.group_size;
  }

  const Config& config_;
  TensorBinder& binder_;
  Resolver resolver_;
};

// ---- writing (make-tiny) ----------------------------------------------------------------------

// The recipe of make-tiny: the published K3 mixed recipe (§2.5), or the same module set with one algo.
std::string recipe_algo(FamilyId variant, const ParamSpec& spec) {
  if (modelopt::never_quantized(spec)) return "";
  if (spec.group == ParamGroup::Experts) return variant == FamilyId::ModelOptFp8 ? "FP8" : "NVFP4";
  if (spec.group == ParamGroup::Kda || spec.group == ParamGroup::Mla) {
    return variant == FamilyId::ModelOptMixed ? "FP8_PB_WO" : variant == FamilyId::ModelOptNvfp4 ? "NVFP4" : "FP8";
  }
  return "";  // dense MLP, shared experts: excluded
}

// exclude_modules of §2.5, each with its block_sparse_moe/mlp and prefix aliases.
std::vector<std::string> exclude_patterns(const K3Config& c) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& p) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  for (const char* m : {"gate", "routed_expert_up_proj", "routed_expert_down_proj", "routed_expert_norm", "shared_experts"}) {
    add(std::string("*block_sparse_moe.") + m + "*");
    add(std::string("*mlp.") + m + "*");
  }
  for (const char* p : {"*self_attn.q_conv1d*", "*self_attn.k_conv1d*", "*self_attn.v_conv1d*", "*self_attn.o_norm*",
                        "*q_a_layernorm*", "*kv_a_layernorm*", "*_res_proj*", "*_res_norm*", "*layernorm*"}) {
    add(p);
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.is_moe(i)) continue;
    for (const std::string& s : modelopt::module_spellings(layer_prefix(i) + "mlp.*")) add(s);
  }
  for (const char* p : {"language_model.lm_head", "lm_head", "vision_tower*", "mm_projector*"}) add(p);
  return out;
}

// quantized_layers of the mixed recipe: every spelling of every quantized module, plus the
// engine-specific fused names of each attention layer.
Json quantized_layers(const FloatSource& source) {
  const K3Config& c = source.config();
  Json layers = Json::object();
  auto add = [&](const std::string& logical_module, const std::string& algo) {
    Json entry = {{"quant_algo", algo}};
    if (algo == "NVFP4") entry["group_size"] = kNvfp4Group;
    for (const std::string& s : modelopt::module_spellings(logical_module)) {
      // Kimi-Linear names carry no multimodal prefix; K3 names get every alias (spec §2.2).
      if (c.model_type != ModelType::kKimiK3 && s.rfind("model.", 0) != 0) continue;
      layers[s] = entry;
    }
  };
  for (const ParamSpec& spec : source.params()) {
    const std::string algo = recipe_algo(FamilyId::ModelOptMixed, spec);
    if (!algo.empty()) add(module_of(spec), algo);
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::vector<const char*> fused = c.is_kda(i) ? std::vector<const char*>{"fused_qkvg_proj", "in_proj_qkvgfab"}
                                                       : std::vector<const char*>{"fused_qkv_a_proj_with_mqa", "fused_qkv_a_proj"};
    for (const char* f : fused) add(layer_prefix(i) + "self_attn." + f, "FP8_PB_WO");
  }
  return layers;
}

Json producer(const QuantizeOptions& options) {
  std::string version = options.producer;
  for (char& ch : version) ch = ch == ' ' ? '-' : ch;
  return {{"name", "modelopt"}, {"version", version}};
}

// Writes the quantized units of one parameter in the layout of its algo (§2.3, §2.4); input_scale
// from the calibrated amax when there is one, else the recipe constant (modelopt.h).
class QuantizedWriter {
 public:
  QuantizedWriter(SafetensorsPlanBuilder& out, const QuantizeOptions& options) : out_(out), options_(options) {}

  void add(const ParamSpec& spec, const std::string& algo) {
    const uint64_t n = spec.shape[spec.shape.size() - 2], k = spec.shape.back();
    for (int64_t u = 0; u < unit_count(spec); ++u) {
      const int64_t expert = spec.kind == ParamKind::ExpertBank ? u : -1;
      auto name = [&](const char* role) { return unit_tensor(spec, u, role); };
      const std::optional<float> amax = options_.input_amax ? options_.input_amax->of(spec, expert) : std::nullopt;
      const FloatSource& src = out_.source();
      if (algo == "NVFP4") {
        const float input_scale = amax ? *amax / (6.0f * 448.0f) : modelopt::kNvfp4InputScale;
        const std::vector<size_t> ids = {out_.declare(name("weight"), Dtype::U8, {n, k / 2}),
                                         out_.declare(name("weight_scale"), Dtype::F8_E4M3, {n, k / kNvfp4Group}),
                                         out_.declare(name("weight_scale_2"), Dtype::F32, {}),
                                         out_.declare(name("input_scale"), Dtype::F32, {})};
        out_.add_unit(unit_label(spec, expert), algo, ids, [&src, spec, expert, n, k, input_scale] {
          const std::vector<float> w = src.read(spec, expert);
          const float global = nvfp4_global_scale(nvfp4_amax(src, spec, expert, w));
          std::vector<uint8_t> packed(n * k / 2), scales(n * k / kNvfp4Group);
          quantize_nvfp4(w.data(), static_cast<int64_t>(n), static_cast<int64_t>(k), global, packed.data(), scales.data());
          return payloads(std::move(packed), std::move(scales), f32_bytes(&global, 1), f32_bytes(&input_scale, 1));
        });
      } else if (algo == "FP8_PB_WO") {
        const uint64_t nb = (n + kFp8Block - 1) / kFp8Block, kb = (k + kFp8Block - 1) / kFp8Block;
        const std::vector<size_t> ids = {out_.declare(name("weight"), Dtype::F8_E4M3, {n, k}),
                                         out_.declare(name("weight_scale"), Dtype::F32, {nb, 1, kb, 1})};
        out_.add_unit(unit_label(spec, expert), algo, ids, [&src, spec, expert, n, k, nb, kb] {
          const std::vector<float> w = src.read(spec, expert);
          std::vector<uint8_t> q(n * k);
          std::vector<float> scale(nb * kb);
          quantize_fp8_block(w.data(), static_cast<int64_t>(n), static_cast<int64_t>(k), kFp8Block, kFp8Block, q.data(), scale.data());
          return payloads(std::move(q), f32_bytes(scale.data(), scale.size()));
        });
      } else {  // FP8 per tensor: one block spanning the whole tensor gives scale = amax / 448
        const float input_scale = amax ? *amax / 448.0f : modelopt::kFp8InputScale;
        const std::vector<size_t> ids = {out_.declare(name("weight"), Dtype::F8_E4M3, {n, k}),
                                         out_.declare(name("weight_scale"), Dtype::F32, {}),
                                         out_.declare(name("input_scale"), Dtype::F32, {})};
        out_.add_unit(unit_label(spec, expert), algo, ids, [&src, spec, expert, n, k, input_scale] {
          const std::vector<float> w = src.read(spec, expert);
          std::vector<uint8_t> q(n * k);
          float scale = 0.0f;
          const auto N = static_cast<int64_t>(n), K = static_cast<int64_t>(k);
          quantize_fp8_block(w.data(), N, K, N, K, q.data(), &scale);
          return payloads(std::move(q), f32_bytes(&scale, 1), f32_bytes(&input_scale, 1));
        });
      }
    }
  }

 private:
  // amax behind an NVFP4 weight_scale_2: w1 and w3 of one expert share it (one GEMM1, spec §2.2/§3);
  // `w` is the unit's own values (the sibling is read for the shared amax).
  static float nvfp4_amax(const FloatSource& src, const ParamSpec& spec, int64_t expert, const std::vector<float>& w) {
    float amax = 0.0f;
    for (float x : w) amax = std::max(amax, std::fabs(x));
    if (spec.kind == ParamKind::ExpertBank && !ends_with_w2(spec.name)) {
      const std::string stem = spec.name.substr(0, spec.name.size() - 9);  // drop "w1.weight" / "w3.weight"
      const bool is_w1 = spec.name.compare(spec.name.size() - 9, 9, "w1.weight") == 0;
      for (float x : src.read(src.spec(stem + (is_w1 ? "w3.weight" : "w1.weight")), expert)) amax = std::max(amax, std::fabs(x));
    }
    return amax;
  }
  static bool ends_with_w2(const std::string& s) { return s.size() >= 9 && s.compare(s.size() - 9, 9, "w2.weight") == 0; }

  SafetensorsPlanBuilder& out_;
  const QuantizeOptions& options_;
};

}  // namespace

LoadPlan plan_modelopt(const CheckpointDir& ckpt) {
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "missing config.json");
  const Config config = load_config(ckpt);
  LoadPlan plan;
  plan.family = family_name(variant_of(config.algo));
  plan.caps = FamilyCaps{};  // router and latent projections stay BF16; no split kv_b; no pack
  const SafetensorsCheckpoint st = SafetensorsCheckpoint::open(ckpt.dir);
  TensorBinder binder(st, plan);
  plan.params = parameter_inventory(*ckpt.config);
  Planner planner(config, binder);
  planner.check_entries();
  for (const auto& spec : plan.params) plan.bindings.push_back(planner.bind(spec));
  planner.check_fused(plan.params);
  binder.finish();
  return plan;
}

// modelopt-mixed writes the nested hf_quant_config.json (§2.1a); the single-algo variants write the
// flat config.json quantization_config (§2.1b), so that make-tiny exercises both locations.
WritePlan write_plan_modelopt(FamilyId variant, const FloatSource& source, Json config_doc, const QuantizeOptions& options) {
  SafetensorsPlanBuilder out(source);
  QuantizedWriter quantized(out, options);
  for (const auto& spec : source.params()) {
    const std::string algo = recipe_algo(variant, spec);
    if (algo.empty()) {
      out.add_unquantized(spec, Dtype::BF16);
    } else {
      quantized.add(spec, algo);
    }
  }
  const Json exclude = exclude_patterns(source.config());
  std::vector<std::pair<std::string, std::string>> files;
  if (variant == FamilyId::ModelOptMixed) {
    const Json hf = {{"producer", producer(options)},
                     {"quantization",
                      {{"quant_algo", "MIXED_PRECISION"},
                       {"kv_cache_quant_algo", nullptr},
                       {"group_size", kNvfp4Group},
                       {"quantized_layers", quantized_layers(source)},
                       {"exclude_modules", exclude}}}};
    files.push_back({"hf_quant_config.json", hf.dump(2) + "\n"});
  } else {
    Json q = {{"quant_method", "modelopt"},
              {"quant_algo", variant == FamilyId::ModelOptNvfp4 ? "NVFP4" : "FP8"},
              {"kv_cache_scheme", nullptr},
              {"ignore", exclude},
              {"producer", producer(options)}};
    if (variant == FamilyId::ModelOptNvfp4) q["group_size"] = kNvfp4Group;
    config_doc["quantization_config"] = q;
  }
  return out.build(std::move(config_doc), std::move(files));
}

}  // namespace family
}  // namespace k3
