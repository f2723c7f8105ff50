// llama.cpp-style GGUF checkpoints of Kimi-K3 / Kimi-Linear (split shards), alone or with the Kimi
// GGML MoE ExpertPack for the routed experts (spec quant-formats §5, §6).
//
// Config: k3 reads config.json next to the shards and cross-checks the GGUF metadata against it
// (llama.cpp's "<arch>.block_count", "<arch>.embedding_length", … keys); a directory without
// config.json is refused rather than half-derived from metadata.
// Names: spec §5.4 (kimi_k3_gguf.py). GGUF ne is the reverse of the [N, K] shape.
// Split MLA K/V (attn_k_b Q4_0 + attn_v_b Q2_K) only in the ExpertPack family (FamilyCaps).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "io/gguf.h"
#include "quant/families/expert_pack.h"
#include "quant/families/gguf_names.h"
#include "quant/families/family.h"
#include "quant/families/tensor_binder.h"
#include "quant/formats/dense/dense_plan.h"
#include "quant/formats/ggml/ggml_dequant.h"
#include "quant/formats/ggml/ggml_plan.h"

namespace k3::family {
namespace fs = std::filesystem;

namespace {

using namespace gguf;

// ---- planning ------------------------------------------------------------------------------

// The path of the first file of the directory's one GGUF set.
std::string first_gguf_file(const std::string& dir) {
  std::vector<std::string> all, firsts;
  static const std::regex kFirst(R"(.*-00001-of-\d{5}\.gguf)");
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".gguf") continue;
    all.push_back(e.path().string());
    if (std::regex_match(e.path().filename().string(), kFirst)) firsts.push_back(e.path().string());
  }
  if (all.size() == 1) return all.front();
  if (firsts.size() == 1) return firsts.front();
  throw Error(Where{dir, "", ""}, "cannot tell which GGUF file set to load: " + std::to_string(all.size()) + " .gguf files, " +
                                      std::to_string(firsts.size()) + " of them first splits (-00001-of-N)");
}

class GgufPlanner {
 public:
  GgufPlanner(const CheckpointDir& ckpt, bool pack, LoadPlan& plan)
      : ckpt_(ckpt), config_(*ckpt.config), pack_(pack), plan_(plan), gguf_(GgufModel::open(first_gguf_file(ckpt.dir))) {
    for (const auto& f : gguf_.files()) plan_.files.push_back(f.path());
  }

  void run() {
    check_files_and_metadata();
    if (pack_) {
      if (!config_.moe) throw Error(Where{ckpt_.path("config.json"), "", ""}, "an ExpertPack checkpoint needs a MoE config");
      pack_plan_ = plan_kimi_expert_pack(ckpt_.dir, config_, gguf_, plan_);
      skip_routed_bank_tensors();
    }
    for (const auto& spec : plan_.params) plan_.bindings.push_back(bind(spec));
    finish();
  }

 private:
  const std::string& first_path() const { return gguf_.first().path(); }
  void problem(const Where& where, const std::string& message) { plan_.problems.push_back({where, message}); }
  void param_problem(const std::string& param, const std::string& message) {
    problem(Where{first_path(), "", ""}, "parameter '" + param + "': " + message);
  }

  void check_files_and_metadata() {
    std::set<std::string> members;
    for (const auto& f : gguf_.files()) members.insert(fs::path(f.path()).filename().string());
    for (const auto& e : fs::directory_iterator(ckpt_.dir)) {
      if (e.path().extension() == ".gguf" && !members.count(e.path().filename().string())) {
        problem(Where{e.path().string(), "", ""}, "GGUF file is not part of the split set of " + first_path());
      }
    }
    const std::string arch = gguf_architecture(config_);
    for (const auto& f : gguf_.files()) {
      const Where where{f.path(), "", "general.architecture"};
      std::optional<std::string> got;
      try {
        got = f.find_string("general.architecture");
      } catch (const Error& e) {
        problem(e.where(), e.detail());
        continue;
      }
      if (!got) {
        problem(where, "missing (config.json describes " + arch + ")");
      } else if (*got != arch) {
        problem(where, "is '" + *got + "' but config.json describes " + arch);
      }
    }
    if (pack_ && arch != "kimi-k3") {
      problem(Where{first_path(), "", "general.architecture"}, "the Kimi GGML MoE ExpertPack requires kimi-k3, got " + arch);
    }
    for (const auto& [key, want] : metadata_integers(config_)) {
      const GgufValue* v = gguf_.find(key);
      const std::optional<int64_t> got = v ? integer_of(*v) : std::nullopt;
      if (!v) {
        problem(Where{first_path(), "", key}, "missing (config.json has " + std::to_string(want) + ")");
      } else if (got != want) {
        problem(Where{first_path(), "", key}, "is " + (got ? std::to_string(*got) : "not an integer") + " but config.json has " +
                                                  std::to_string(want));
      }
    }
  }

  // The ExpertPack family loads routed experts from the pack; the GGUF may still hold the banks
  // the pack was cut from: skipped, but their type and size must be the pack's.
  void skip_routed_bank_tensors() {
    const uint64_t experts = static_cast<uint64_t>(config_.moe->num_experts);
    for (int64_t layer : pack_plan_.layers) {
      for (int r = 0; r < 3; ++r) {
        const std::string name = blk(layer, std::string("ffn_") + kPackRoleNames[r] + "_exps.weight");
        const GgufTensorInfo* t = gguf_.find_tensor(name);
        if (t == nullptr) continue;
        consumed_.insert(name);
        plan_.skipped.push_back(name);
        const PackRoleSpec& role = pack_plan_.roles[r];
        const Shape want{experts, role.rows, role.cols};
        if (t->type != role.type || t->shape() != want) {
          problem(Where{plan_.files[t->file_index], name, "type"},
                  "routed bank " + std::string(ggml_type_name(t->type)) + " " + shape_string(t->shape()) + " is not the pack's " +
                      kPackRoleNames[r] + " role " + std::string(ggml_type_name(role.type)) + " " + shape_string(want));
        }
      }
    }
  }

  // The tensor as a plan source (logical shape: ne reversed).
  SourceTensor source(const GgufTensorInfo& t) const {
    return SourceTensor{static_cast<uint32_t>(t.file_index), t.name,
                        is_float_type(t.type) ? float_dtype_name(t.type) : std::string(ggml_type_name(t.type)), t.shape(),
                        t.file_offset, t.nbytes};
  }
  Where where_of(const GgufTensorInfo& t, const char* field) const { return Where{plan_.files[t.file_index], t.name, field}; }

  const GgufTensorInfo* take(const std::string& name, const std::string& param) {
    const GgufTensorInfo* t = gguf_.find_tensor(name);
    if (t == nullptr) {
      param_problem(param, "missing GGUF tensor '" + name + "'");
      return nullptr;
    }
    consumed_.insert(name);
    return t;
  }

  // The scheme of a stored tensor, or nullopt (problem recorded) for a type k3 cannot decode or
  // a quantized type on an unquantized parameter.
  std::optional<Scheme> scheme_of(const GgufTensorInfo& t, const ParamSpec& spec) {
    if (is_float_type(t.type)) return dense_scheme(float_dtype_name(t.type));
    const bool unquantized = spec.kind == ParamKind::Vector || spec.kind == ParamKind::Conv;
    if (unquantized) {
      problem(where_of(t, "type"), "GGML type " + std::string(ggml_type_name(t.type)) + " is not a float type, but parameter '" +
                                       spec.name + "' is unquantized");
      return std::nullopt;
    }
    if (!ggml_has_dequant(t.type)) {
      problem(where_of(t, "type"), "GGML type " + std::string(ggml_type_name(t.type)) + " is not supported by k3");
      return std::nullopt;
    }
    return ggml_scheme(t.type);
  }

  bool shape_ok(const GgufTensorInfo& t, const ParamSpec& spec, bool squeeze) {
    const Shape got = t.shape();
    if (squeeze ? squeezed(got) == squeezed(spec.shape) : got == spec.shape) return true;
    problem(where_of(t, "shape"),
            "shape " + shape_string(got) + " does not match parameter '" + spec.name + "' " + shape_string(spec.shape));
    return false;
  }

  Binding bind(const ParamSpec& spec) {
    Binding b;
    b.param = spec.name;
    if (spec.kind == ParamKind::ExpertBank) {
      pack_ ? bind_pack_bank(spec, b) : bind_gguf_bank(spec, b);
      return b;
    }
    if (is_kv_b(spec) && plan_.caps.split_gguf_kv_b) {
      bind_split_kv_b(spec, b);
      return b;
    }
    const GgufTensorInfo* t = take(gguf_tensor_name(config_, spec), spec.name);
    if (t == nullptr) return b;
    const std::optional<Scheme> scheme = scheme_of(*t, spec);
    if (!scheme) return b;
    b.scheme = *scheme;
    const bool vector_like = spec.kind == ParamKind::Vector || spec.kind == ParamKind::Conv;
    if (!shape_ok(*t, spec, vector_like)) return b;
    b.parts.push_back({"weight", {source(*t)}});
    if (is_a_log(spec)) b.transforms.push_back(Transform::ALogFromNegExp);
    if (is_res_proj(spec)) b.transforms.push_back(Transform::ProjFromResScore);
    if (is_res_norm(spec)) b.transforms.push_back(Transform::OnesFromResScore);
    return b;
  }

  // Plain GGUF: one 3-D bank tensor ne = [K, N, E]; one source per expert = its byte slice.
  void bind_gguf_bank(const ParamSpec& spec, Binding& b) {
    const GgufTensorInfo* t = take(gguf_tensor_name(config_, spec), spec.name);
    if (t == nullptr) return;
    const std::optional<Scheme> scheme = scheme_of(*t, spec);
    if (!scheme || !shape_ok(*t, spec, false)) return;
    b.scheme = *scheme;
    const uint64_t experts = spec.shape[0];
    const uint64_t per_expert = t->nbytes / experts;
    SourcePart part{"weight", {}};
    for (uint64_t e = 0; e < experts; ++e) {
      SourceTensor s = source(*t);
      s.shape = {spec.shape[1], spec.shape[2]};
      s.offset = t->file_offset + e * per_expert;
      s.nbytes = per_expert;
      part.tensors.push_back(std::move(s));
    }
    b.parts.push_back(std::move(part));
    b.transforms.push_back(Transform::SliceExpert);
  }

  // ExpertPack: the pack's slices of this layer and role (w1 = gate, w3 = up, w2 = down).
  void bind_pack_bank(const ParamSpec& spec, Binding& b) {
    const int role = ends_with(spec.name, "w1.weight") ? static_cast<int>(PackRole::Gate)
                     : ends_with(spec.name, "w3.weight") ? static_cast<int>(PackRole::Up)
                                                         : static_cast<int>(PackRole::Down);
    b.scheme = ggml_scheme(pack_plan_.roles[role].type);
    if (!pack_plan_.valid()) return;  // the pack's problems are already recorded
    const auto it = std::find(pack_plan_.layers.begin(), pack_plan_.layers.end(), spec.layer);
    b.parts.push_back({"weight", pack_plan_.slices[static_cast<size_t>(it - pack_plan_.layers.begin())][role]});
  }

  // Split MLA K/V (spec §5.5): k_b [n_h, r_kv, d_nope] Q4_0 and v_b [n_h, d_v, r_kv] Q2_K.
  void bind_split_kv_b(const ParamSpec& spec, Binding& b) {
    b.scheme = ggml_split_kv_b_scheme();
    const auto [k_name, v_name] = split_kv_b_names(spec.layer);
    const GgufTensorInfo* k = take(k_name, spec.name);
    const GgufTensorInfo* v = take(v_name, spec.name);
    if (k == nullptr || v == nullptr) return;
    bool ok = true;
    if (k->type != GgmlType::Q4_0) {
      problem(where_of(*k, "type"), "Kimi-K3 MLA K projection must remain GGUF Q4_0");
      ok = false;
    }
    if (v->type != GgmlType::Q2_K) {
      problem(where_of(*v, "type"), "Kimi-K3 MLA V projection must remain GGUF Q2_K");
      ok = false;
    }
    const MlaConfig& m = config_.mla;
    const uint64_t heads = static_cast<uint64_t>(m.num_heads), rkv = static_cast<uint64_t>(m.kv_lora_rank);
    const Shape k_want{heads, rkv, static_cast<uint64_t>(m.qk_nope_head_dim)};
    const Shape v_want{heads, static_cast<uint64_t>(m.v_head_dim), rkv};
    for (const auto& [t, want] : {std::pair{k, k_want}, std::pair{v, v_want}}) {
      if (t->shape() != want) {
        problem(where_of(*t, "shape"), "shape " + shape_string(t->shape()) + " is not the split of parameter '" + spec.name + "' " +
                                           shape_string(want));
        ok = false;
      }
    }
    if (!ok) return;
    b.parts.push_back({"k_b", {source(*k)}});
    b.parts.push_back({"v_b", {source(*v)}});
  }

  void finish() {
    static const std::regex kSplitKv(R"(blk\.\d+\.attn_[kv]_b\.weight)");
    for (const auto& t : gguf_.tensors()) {
      if (consumed_.count(t.name)) continue;
      if (!plan_.caps.split_gguf_kv_b && std::regex_match(t.name, kSplitKv)) {
        problem(where_of(t, ""), "split MLA K/V tensors need a family with split GGUF kv_b (the ExpertPack family); this family binds "
                                 "attn_kv_b whole");
      } else {
        problem(where_of(t, ""), "unsupported Kimi-K3 GGUF tensor name");
      }
    }
  }

  const CheckpointDir& ckpt_;
  const K3Config& config_;
  bool pack_;
  LoadPlan& plan_;
  GgufModel gguf_;
  PlannedPack pack_plan_;
  std::set<std::string> consumed_;
};

}  // namespace

LoadPlan plan_gguf(const CheckpointDir& ckpt) {
  if (!ckpt.config) {
    throw Error(Where{ckpt.path("config.json"), "", ""},
                "missing config.json: k3 reads the model config from config.json next to the GGUF shards and cross-checks the GGUF "
                "metadata against it");
  }
  const bool pack = ckpt.family == FamilyId::GgufExpertPack;
  LoadPlan plan;
  plan.family = family_name(ckpt.family);
  plan.caps.quantized_latent_projections = true;
  plan.caps.split_gguf_kv_b = pack;
  plan.caps.experts_from_pack = pack;
  plan.params = parameter_inventory(*ckpt.config);
  GgufPlanner(ckpt, pack, plan).run();
  return plan;
}

}  // namespace k3::family
