// ModelSlim (Ascend) checkpoints (spec §4): safetensors shards plus quant_model_description.json,
// a flat map "<HF tensor name>" -> scheme ("W4A8_DYNAMIC", "W8A8_DYNAMIC", "W8A8", "FLOAT", …).
//
// Planning rules:
//  - a parameter's scheme is the description entry of its weight tensor "<module>.weight" (the
//    parameter name itself for vectors such as A_log), spelled as the checkpoint spells it; the
//    multimodal "language_model." prefix and mlp <-> block_sparse_moe are spelling variants;
//  - routed experts: the scheme is read from expert 0 (w1 and w3 must agree) and must hold for
//    every expert; supported MoE schemes are W4A8_DYNAMIC, W8A8_DYNAMIC and FLOAT;
//  - fused runtime modules (KDA q/k/v[/g] -> fused_qkvg_proj / qkv_proj, gate/up -> gate_up_proj)
//    must agree FLOAT vs quantized and, when quantized, on one scheme;
//  - MLA kv_b_proj stays ONE dense FLOAT tensor (split K/V storage is ExpertPack only), the router
//    gate, embeddings, norms, conv weights and other vectors are never quantized;
//  - W4A8 int4 layout: description version "1.0.0" = packed along N (I8 [N/2, K]), otherwise one
//    int4 per int8 (I8 [N, K]); per-group scales are declared by a "<module>.weight_scale_second"
//    description entry and need group_size > 0.
// Capabilities: latent projections may be quantized (ModelSlim advertises it); kv_b is never split.
#include <algorithm>
#include <fstream>
#include <map>
#include <optional>

#include "quant/families/checkpoint_writer.h"
#include "quant/families/family.h"
#include "quant/families/tensor_binder.h"
#include "quant/formats/modelslim/modelslim.h"
#include "quant/formats/modelslim/modelslim_plan.h"
#include "quant/quant_config.h"

namespace k3::family {
namespace {

constexpr const char* kDescriptionFile = "quant_model_description.json";
constexpr const char* kPackedLayoutVersion = "1.0.0";  // spec §4.3: selects the packed int4 layout

enum class MsScheme { Float, W4A8Dynamic, W8A8Dynamic, W8A8Static };

struct SchemeName {
  MsScheme scheme;
  const char* name;
};
constexpr SchemeName kSchemes[] = {
    {MsScheme::W4A8Dynamic, "W4A8_DYNAMIC"},
    {MsScheme::W8A8Dynamic, "W8A8_DYNAMIC"},
    {MsScheme::W8A8Static, "W8A8"},
    {MsScheme::Float, "FLOAT"},
};

std::optional<MsScheme> parse_scheme(const std::string& s) {
  for (const auto& e : kSchemes) {
    if (s == e.name) return e.scheme;
  }
  return std::nullopt;
}

const char* scheme_string(MsScheme s) {
  for (const auto& e : kSchemes) {
    if (s == e.scheme) return e.name;
  }
  return "?";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "model.layers.3.self_attn.q_proj.weight" -> "q_proj".
std::string module_leaf(const std::string& name) {
  const std::string module = ends_with(name, ".weight") ? name.substr(0, name.size() - 7) : name;
  return module.substr(module.rfind('.') + 1);
}

// "<module>.weight" -> "<module>.<role>"
std::string sibling(const std::string& weight_name, const std::string& role) {
  return weight_name.substr(0, weight_name.size() - 6) + role;
}

// The spelling-independent form of a tensor name used to match description keys.
std::string description_form(const std::string& name) {
  std::string n = canonical_tensor_name(name);
  const auto pos = n.find(".mlp.");
  if (pos != std::string::npos) n = n.substr(0, pos) + ".block_sparse_moe." + n.substr(pos + 5);
  return n;
}

class Description {
 public:
  struct Entry {
    std::string key;     // as written
    std::string scheme;  // as written
  };

  Description(const ModelSlimConfig& config, std::string path, LoadPlan& plan) : path_(std::move(path)) {
    group_size_ = config.group_size.value_or(0);
    packed_ = config.version == kPackedLayoutVersion;
    for (const auto& [key, scheme] : config.tensor_schemes) {
      auto [it, fresh] = by_form_.emplace(description_form(key), Entry{key, scheme});
      if (!fresh && it->second.scheme != scheme) {
        plan.problems.push_back({Where{path_, "", key}, "names the same tensor as '" + it->second.key +
                                                            "' with a different scheme ('" + scheme + "' vs '" +
                                                            it->second.scheme + "')"});
      }
    }
  }

  const Entry* find(const std::string& logical) const {
    auto it = by_form_.find(description_form(logical));
    return it == by_form_.end() ? nullptr : &it->second;
  }
  const std::string& path() const { return path_; }
  int64_t group_size() const { return group_size_; }
  bool packed() const { return packed_; }

 private:
  std::string path_;
  int64_t group_size_ = 0;
  bool packed_ = false;
  std::map<std::string, Entry> by_form_;
};

// A parameter's resolved description scheme.
struct Resolved {
  MsScheme scheme = MsScheme::Float;
  bool per_group = false;  // W4A8 with weight_scale_second
  bool operator==(const Resolved&) const = default;
};

std::string resolved_label(const Resolved& r) {
  return std::string(scheme_string(r.scheme)) + (r.per_group ? " per-group" : "");
}

class Planner {
 public:
  Planner(const CheckpointDir& ckpt, const Description& desc, TensorBinder& binder, LoadPlan& plan)
      : config_(*ckpt.config), desc_(desc), binder_(binder), plan_(plan) {}

  void run() {
    const auto& params = plan_.params;
    std::vector<std::optional<Resolved>> resolved(params.size());
    for (size_t i = 0; i < params.size(); ++i) resolved[i] = resolve(params[i]);
    check_expert_gate_up(resolved);
    check_fused_modules(resolved);
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamSpec& spec = params[i];
      if (!resolved[i]) {
        plan_.bindings.push_back(absorb(spec));
      } else if (resolved[i]->scheme == MsScheme::Float) {
        plan_.bindings.push_back(bind_dense(binder_, spec));
      } else {
        plan_.bindings.push_back(bind_quantized(spec, *resolved[i]));
      }
      if (spec.group == ParamGroup::Mla && module_leaf(spec.name) == "kv_b_proj") reject_split_kv_b(spec);
    }
  }

 private:
  void problem(const std::string& key, const std::string& message) {
    plan_.problems.push_back({Where{desc_.path(), "", key}, message});
  }

  // The description entry of a logical tensor name; a missing one is a problem for `param`.
  const Description::Entry* entry(const std::string& logical, const std::string& param) {
    const Description::Entry* e = desc_.find(logical);
    if (e == nullptr) {
      plan_.problems.push_back({Where{desc_.path(), "", ""}, "parameter '" + param + "': missing key '" +
                                                                 stored_tensor_name(config_, logical) + "'"});
    }
    return e;
  }

  std::optional<MsScheme> scheme_of(const Description::Entry& e) {
    auto s = parse_scheme(e.scheme);
    if (!s) problem(e.key, "unsupported ModelSlim scheme '" + e.scheme + "' (supported: W4A8_DYNAMIC, W8A8_DYNAMIC, W8A8, FLOAT)");
    return s;
  }

  // Why this parameter must stay FLOAT, or nullptr when it may be quantized.
  static const char* float_only_reason(const ParamSpec& spec) {
    if (spec.group == ParamGroup::Mla && module_leaf(spec.name) == "kv_b_proj") {
      return "MLA kv_b_proj must stay one dense FLOAT tensor in ModelSlim checkpoints (split K/V storage is ExpertPack only)";
    }
    if (spec.group == ParamGroup::Router) return "the MoE router gate is never quantized";
    if (spec.kind != ParamKind::Linear && spec.kind != ParamKind::ExpertBank) {
      return "embeddings, norms, conv weights and other vectors are never quantized";
    }
    return nullptr;
  }

  std::optional<Resolved> resolve(const ParamSpec& spec) {
    const bool bank = spec.kind == ParamKind::ExpertBank;
    const std::string weight = bank ? expert_tensor_name(spec.name, 0, "weight") : spec.name;
    const Description::Entry* e = entry(weight, spec.name);
    if (e == nullptr) return std::nullopt;
    const std::optional<MsScheme> s = scheme_of(*e);
    if (!s) return std::nullopt;
    if (*s != MsScheme::Float) {
      if (const char* reason = float_only_reason(spec)) {
        problem(e->key, std::string(reason) + ", got '" + e->scheme + "'");
        return std::nullopt;
      }
      if (bank && *s == MsScheme::W8A8Static) {
        problem(e->key, "scheme 'W8A8' is not supported for MoE experts (supported: W4A8_DYNAMIC, W8A8_DYNAMIC, FLOAT)");
        return std::nullopt;
      }
    }
    Resolved r{*s, false};
    if (*s == MsScheme::W4A8Dynamic) {
      if (const auto* second = desc_.find(sibling(weight, "weight_scale_second"))) {
        if (desc_.group_size() <= 0) {
          problem(second->key, "per-group W4A8 scales are listed but group_size is " + std::to_string(desc_.group_size()) +
                                   " (must be > 0)");
          return std::nullopt;
        }
        r.per_group = true;
      }
    }
    if (bank && !same_for_every_expert(spec, *e)) return std::nullopt;
    return r;
  }

  // The MoE scheme is read from expert 0 and must hold for every expert.
  bool same_for_every_expert(const ParamSpec& spec, const Description::Entry& first) {
    bool ok = true;
    for (uint64_t x = 1; x < spec.shape[0]; ++x) {
      const Description::Entry* e = entry(expert_tensor_name(spec.name, static_cast<int64_t>(x), "weight"), spec.name);
      if (e == nullptr) {
        ok = false;
      } else if (e->scheme != first.scheme) {
        problem(e->key, "expert " + std::to_string(x) + " has scheme '" + e->scheme + "' but expert 0 has '" + first.scheme +
                            "' (the MoE scheme is read from expert 0 and must hold for every expert)");
        ok = false;
      }
    }
    return ok;
  }

  // w1 (gate) and w3 (up) of one layer feed one fused GEMM1: one scheme.
  void check_expert_gate_up(std::vector<std::optional<Resolved>>& resolved) {
    for (size_t i = 0; i < plan_.params.size(); ++i) {
      const std::string& name = plan_.params[i].name;
      if (!ends_with(name, "experts.w3.weight")) continue;
      const int64_t w1 = plan_.index_of(name.substr(0, name.size() - 9) + "w1.weight");
      if (w1 < 0 || !resolved[i] || !resolved[w1] || *resolved[i] == *resolved[w1]) continue;
      problem(stored_tensor_name(config_, expert_tensor_name(name, 0, "weight")),
              "expert 0 up projection (w3) is " + resolved_label(*resolved[i]) + " but gate projection (w1) is " +
                  resolved_label(*resolved[w1]) + " (they must agree)");
      resolved[i].reset();
      resolved[w1].reset();
    }
  }

  // The runtime module a parameter is fused into, or "".
  std::string fused_module(const ParamSpec& spec) const {
    if (spec.kind != ParamKind::Linear) return "";
    const std::string leaf = module_leaf(spec.name);
    const std::string prefix = spec.name.substr(0, spec.name.size() - leaf.size() - 7);  // up to and incl. the '.'
    if (spec.group == ParamGroup::Kda && (leaf == "q_proj" || leaf == "k_proj" || leaf == "v_proj" || leaf == "g_proj")) {
      return prefix + (config_.kda.use_full_rank_gate ? "fused_qkvg_proj" : "qkv_proj");
    }
    if ((spec.group == ParamGroup::DenseMlp || spec.group == ParamGroup::Shared) && (leaf == "gate_proj" || leaf == "up_proj")) {
      return prefix + "gate_up_proj";
    }
    return "";
  }

  void check_fused_modules(std::vector<std::optional<Resolved>>& resolved) {
    std::map<std::string, std::vector<size_t>> groups;
    for (size_t i = 0; i < plan_.params.size(); ++i) {
      const std::string fused = fused_module(plan_.params[i]);
      if (!fused.empty()) groups[fused].push_back(i);
    }
    for (const auto& [fused, members] : groups) {
      if (std::any_of(members.begin(), members.end(), [&](size_t i) { return !resolved[i]; })) continue;
      bool any_float = false, any_quantized = false, one_scheme = true;
      std::string shards;
      for (size_t i : members) {
        const Resolved& r = *resolved[i];
        (r.scheme == MsScheme::Float ? any_float : any_quantized) = true;
        one_scheme = one_scheme && r == *resolved[members.front()];
        shards += (shards.empty() ? "" : ", ") + module_leaf(plan_.params[i].name) + ": " + resolved_label(r);
      }
      if (one_scheme) continue;
      const std::string runtime = stored_tensor_name(config_, fused);
      plan_.problems.push_back(
          {Where{desc_.path(), "", ""},
           any_float && any_quantized
               ? "Detected some but not all shards of " + runtime + " are quantized (" + shards + "); all shards of a fused module need the same precision"
               : "shards of fused module " + runtime + " use different schemes (" + shards + "); a fused module needs one"});
      for (size_t i : members) resolved[i].reset();
    }
  }

  void check_part(const SourceTensor& t, const PartLayout& rule, const Scheme& s, const std::string& param) {
    const std::string what = s.name() + " part '" + rule.role + "' of parameter '" + param + "'";
    const bool float_ok = t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F32";
    const bool dtype_ok = rule.dtypes.empty() ? float_ok : std::find(rule.dtypes.begin(), rule.dtypes.end(), t.dtype) != rule.dtypes.end();
    if (!dtype_ok) {
      std::string want;
      for (const auto& d : rule.dtypes) want += (want.empty() ? "" : " or ") + d;
      binder_.problem(t, "dtype", "dtype " + t.dtype + " for " + what + ", expected " + (want.empty() ? "BF16, F16 or F32" : want));
    }
    if (std::find(rule.shapes.begin(), rule.shapes.end(), t.shape) == rule.shapes.end()) {
      std::string want;
      for (const auto& sh : rule.shapes) want += (want.empty() ? "" : " or ") + shape_string(sh);
      binder_.problem(t, "shape", "shape " + shape_string(t.shape) + " for " + what + ", expected " + want);
    }
  }

  Binding bind_quantized(const ParamSpec& spec, const Resolved& r) {
    const Scheme s = r.scheme == MsScheme::W4A8Dynamic
                         ? w4a8_scheme(r.per_group ? static_cast<uint32_t>(desc_.group_size()) : 0, desc_.packed())
                         : w8a8_scheme(r.scheme == MsScheme::W8A8Static);
    const bool bank = spec.kind == ParamKind::ExpertBank;
    const uint64_t n = spec.shape[spec.shape.size() - 2], k = spec.shape.back();
    Binding b{spec.name, s, {}, {}};
    for (const std::string& problem : shape_problems(s, n, k)) binder_.problem_for_param(spec.name, problem);
    const uint64_t experts = bank ? spec.shape[0] : 1;
    for (const PartLayout& rule : modelslim_parts(s, n, k)) {
      SourcePart part{rule.role, {}};
      for (uint64_t e = 0; e < experts; ++e) {
        const std::string name = bank ? expert_tensor_name(spec.name, static_cast<int64_t>(e), rule.role) : sibling(spec.name, rule.role);
        auto t = rule.required ? binder_.take(name, spec.name) : binder_.take_if_present(name);
        if (!t) continue;
        check_part(*t, rule, s, spec.name);
        part.tensors.push_back(*t);
      }
      if (!part.tensors.empty()) b.parts.push_back(std::move(part));
    }
    return b;
  }

  // A parameter whose scheme could not be resolved: its tensors are consumed (the problem is already
  // recorded) and it is bound to nothing.
  Binding absorb(const ParamSpec& spec) {
    static const char* const kRoles[] = {"weight", "weight_scale", "weight_offset", "weight_scale_second",
                                         "weight_offset_second", "scale_bias", "input_scale", "input_offset",
                                         "quant_bias", "deq_scale"};
    const bool bank = spec.kind == ParamKind::ExpertBank;
    if (!bank && !ends_with(spec.name, ".weight")) {
      binder_.take_if_present(spec.name);
    } else {
      for (uint64_t e = 0; e < (bank ? spec.shape[0] : 1); ++e) {
        for (const char* role : kRoles) {
          binder_.take_if_present(bank ? expert_tensor_name(spec.name, static_cast<int64_t>(e), role) : sibling(spec.name, role));
        }
      }
    }
    return Binding{spec.name, Scheme{}, {}, {}};
  }

  // Split MLA K/V ("k_b_proj" / "v_b_proj") is an ExpertPack storage; in ModelSlim it is a problem.
  void reject_split_kv_b(const ParamSpec& spec) {
    for (const char* leaf : {"k_b_proj", "v_b_proj"}) {
      const std::string split = spec.name.substr(0, spec.name.size() - 16) + leaf + ".weight";  // strip "kv_b_proj.weight"
      if (auto t = binder_.take_if_present(split)) {
        binder_.problem(*t, "", "split MLA K/V tensor in a ModelSlim checkpoint: kv_b_proj must stay one dense FLOAT tensor "
                                "(split K/V storage is ExpertPack only)");
      }
    }
  }

  const K3Config& config_;
  const Description& desc_;
  TensorBinder& binder_;
  LoadPlan& plan_;
};

// ---- make-tiny writer -----------------------------------------------------------------------

// [UNCONFIRMED] group size of the tiny checkpoints (the real one's is not known; 64 divides every
// tiny/small expert K: 128, 256, 512).
constexpr int64_t kTinyGroupSize = 64;

// What make-tiny stores each parameter as (spec §4.4 / §7 where consistent; see
// docs/decisions/modelslim-make-tiny-assignment.md): routed experts W4A8 per-group, shared experts
// W4A8 per-channel, latent projections and the KDA fused q/k/v[/g] W8A8_DYNAMIC, everything else
// (kv_b_proj included) FLOAT.
enum class TinyChoice { Float, W4A8PerGroup, W4A8PerChannel, W8A8Dynamic };

TinyChoice tiny_choice(const ParamSpec& spec) {
  if (spec.kind == ParamKind::ExpertBank) return TinyChoice::W4A8PerGroup;
  if (spec.kind != ParamKind::Linear) return TinyChoice::Float;
  const std::string leaf = module_leaf(spec.name);
  if (spec.group == ParamGroup::Shared) return TinyChoice::W4A8PerChannel;
  if (spec.group == ParamGroup::Latent) return TinyChoice::W8A8Dynamic;
  if (spec.group == ParamGroup::Kda && (leaf == "q_proj" || leaf == "k_proj" || leaf == "v_proj" || leaf == "g_proj")) {
    return TinyChoice::W8A8Dynamic;
  }
  return TinyChoice::Float;
}

class TinyWriter {
 public:
  explicit TinyWriter(const FloatSource& source) : out_(source) {
    desc_["model_quant_type"] = "W4A8_DYNAMIC";
    desc_["version"] = kPackedLayoutVersion;
    desc_["group_size"] = kTinyGroupSize;
  }

  void add(const ParamSpec& spec) {
    const TinyChoice choice = tiny_choice(spec);
    if (choice == TinyChoice::Float) return add_float(spec);
    const bool bank = spec.kind == ParamKind::ExpertBank;
    const uint64_t n = spec.shape[spec.shape.size() - 2], k = spec.shape.back();
    for (uint64_t e = 0; e < (bank ? spec.shape[0] : 1); ++e) {
      const int64_t expert = bank ? static_cast<int64_t>(e) : -1;
      const std::string weight = bank ? expert_tensor_name(spec.name, expert, "weight") : spec.name;
      add_module(spec, expert, weight, choice, static_cast<int64_t>(n), static_cast<int64_t>(k));
    }
  }

  WritePlan build(Json config_doc) { return out_.build(std::move(config_doc), {{kDescriptionFile, desc_.dump(2) + "\n"}}); }

 private:
  void add_float(const ParamSpec& spec) {
    out_.add_unquantized(spec, Dtype::BF16);
    const K3Config& c = out_.config();
    if (spec.kind == ParamKind::ExpertBank) {
      for (uint64_t e = 0; e < spec.shape[0]; ++e) {
        desc_[stored_tensor_name(c, expert_tensor_name(spec.name, static_cast<int64_t>(e), "weight"))] = "FLOAT";
      }
    } else {
      desc_[stored_tensor_name(c, spec.name)] = "FLOAT";
    }
  }

  size_t tensor(const std::string& weight, const std::string& role, const char* scheme, Dtype dtype, std::vector<uint64_t> shape) {
    desc_[stored_tensor_name(out_.config(), sibling(weight, role))] = scheme;
    return out_.declare(sibling(weight, role), dtype, std::move(shape));
  }

  // Linear scales are stored in the params dtype (BF16), expert scales in F32 (spec §4.2, §4.3).
  void add_module(const ParamSpec& spec, int64_t expert, const std::string& weight, TinyChoice choice, int64_t n, int64_t k) {
    const uint64_t N = static_cast<uint64_t>(n), K = static_cast<uint64_t>(k);
    const Dtype sdt = expert >= 0 ? Dtype::F32 : Dtype::BF16;
    auto scale_bytes = [sdt](const std::vector<float>& v) { return sdt == Dtype::F32 ? f32_bytes(v.data(), v.size()) : bf16_bytes(v.data(), v.size()); };
    auto int8_bytes = [](const std::vector<int8_t>& v) { return std::vector<uint8_t>(v.begin(), v.end()); };
    const FloatSource& src = out_.source();
    if (choice == TinyChoice::W8A8Dynamic) {
      const char* scheme = "W8A8_DYNAMIC";
      const std::vector<size_t> ids = {tensor(weight, "weight", scheme, Dtype::I8, {N, K}), tensor(weight, "weight_scale", scheme, sdt, {N, 1}),
                                       tensor(weight, "weight_offset", scheme, sdt, {N, 1})};
      out_.add_unit(unit_label(spec, expert), scheme, ids, [&src, spec, expert, n, k, sdt, scale_bytes, int8_bytes] {
        const W8A8Weights q = quantize_w8a8(src.read(spec, expert).data(), n, k, sdt == Dtype::BF16);
        return payloads(int8_bytes(q.weight), scale_bytes(q.scale), scale_bytes(std::vector<float>(static_cast<size_t>(n), 0.0f)));
      });
      return;
    }
    const int64_t gs = choice == TinyChoice::W4A8PerGroup ? kTinyGroupSize : 0;
    if (n % 2 != 0 || (gs > 0 && k % gs != 0)) {
      throw Error(Where{"", weight, "shape"}, "dims [" + std::to_string(n) + ", " + std::to_string(k) +
                                                  "] do not fit packed W4A8 with group_size " + std::to_string(gs));
    }
    const char* scheme = "W4A8_DYNAMIC";
    std::vector<size_t> ids = {tensor(weight, "weight", scheme, Dtype::I8, {N / 2, K}), tensor(weight, "weight_scale", scheme, sdt, {N, 1}),
                               tensor(weight, "weight_offset", scheme, sdt, {N, 1})};
    const uint64_t G = gs > 0 ? K / static_cast<uint64_t>(gs) : 0;
    if (gs > 0) {
      ids.push_back(tensor(weight, "weight_scale_second", scheme, sdt, {N, G}));
      ids.push_back(tensor(weight, "weight_offset_second", scheme, sdt, {N, G}));
    }
    ids.push_back(tensor(weight, "scale_bias", scheme, Dtype::F32, {N, 1}));
    out_.add_unit(unit_label(spec, expert), gs > 0 ? "W4A8_DYNAMIC/group" : "W4A8_DYNAMIC/channel", ids,
                  [&src, spec, expert, n, k, gs, G, sdt, scale_bytes, int8_bytes] {
                    const W4A8Weights q = quantize_w4a8(src.read(spec, expert).data(), n, k, gs, true, sdt == Dtype::BF16);
                    Payloads p = payloads(int8_bytes(q.weight), scale_bytes(q.scale), scale_bytes(std::vector<float>(static_cast<size_t>(n), 0.0f)));
                    if (gs > 0) {
                      p.push_back(scale_bytes(q.scale_second));
                      p.push_back(scale_bytes(std::vector<float>(static_cast<size_t>(n) * G, 0.0f)));
                    }
                    p.push_back(f32_bytes(q.scale_bias.data(), q.scale_bias.size()));
                    return p;
                  });
  }

  SafetensorsPlanBuilder out_;
  Json desc_ = Json::object();
};

}  // namespace

LoadPlan plan_modelslim(const CheckpointDir& ckpt) {
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "missing config.json");
  LoadPlan plan;
  plan.family = family_name(FamilyId::ModelSlimW4A8);
  plan.caps.quantized_latent_projections = true;  // ModelSlim advertises quantized latent projections (spec §4.4)
  plan.caps.split_gguf_kv_b = false;              // kv_b_proj stays one dense FLOAT tensor
  plan.caps.experts_from_pack = false;
  const std::string desc_path = ckpt.path(kDescriptionFile);
  const Description desc(load_modelslim_description(desc_path), desc_path, plan);
  const SafetensorsCheckpoint st = SafetensorsCheckpoint::open(ckpt.dir);
  TensorBinder binder(st, plan);
  plan.params = parameter_inventory(*ckpt.config);
  Planner(ckpt, desc, binder, plan).run();
  binder.finish();
  return plan;
}

WritePlan write_plan_modelslim_w4a8(const FloatSource& source, Json config_doc) {
  TinyWriter writer(source);
  for (const auto& spec : source.params()) writer.add(spec);
  return writer.build(std::move(config_doc));
}

}  // namespace k3::family
