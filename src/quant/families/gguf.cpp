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

#include "core/sha256.h"
#include "io/gguf.h"
#include "quant/families/checkpoint_writer.h"
#include "quant/families/expert_pack.h"
#include "quant/families/family.h"
#include "quant/families/tensor_binder.h"
#include "quant/formats/dense/dense_plan.h"
#include "quant/formats/ggml/ggml_dequant.h"
#include "quant/formats/ggml/ggml_plan.h"
#include "quant/formats/ggml/ggml_quantize.h"

namespace k3::family {
namespace fs = std::filesystem;

namespace {

using Shape = std::vector<uint64_t>;

const char* gguf_architecture(const K3Config& c) { return c.model_type == ModelType::kKimiK3 ? "kimi-k3" : "kimi-linear"; }

// [UNCONFIRMED] prefix of the make-tiny shard files ("model-00001-of-00002.gguf").
constexpr char kShardPrefix[] = "model";
constexpr uint32_t kShardCount = 2;
// [UNCONFIRMED] pack file name written next to the manifest (the manifest names it in expert_pack.path).
constexpr char kPackFileName[] = "kimi-k3-experts.ggmlmoepack";

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

// ---- writing -------------------------------------------------------------------------------

// [UNCONFIRMED] the GGUF type make-tiny writes for a parameter: a plausible llama.cpp-like mix.
// Norms, vectors, convs and the router stay F32; small KDA gate projections stay F16/BF16;
// linears use K-quants where rows tile 256, Q8_0 where they tile 32. ExpertPack experts are the
// format's Q2_K/Q2_K/Q3_K.
GgmlType gguf_write_type(const ParamSpec& spec, bool pack) {
  if (spec.kind == ParamKind::Vector || spec.kind == ParamKind::Conv || spec.group == ParamGroup::Router) return GgmlType::F32;
  const uint64_t k = spec.shape.back();
  const bool k256 = k % 256 == 0;
  const bool down = ends_with(spec.name, "down_proj.weight") || ends_with(spec.name, "o_proj.weight") || ends_with(spec.name, "w2.weight");
  if (spec.kind == ParamKind::ExpertBank) {
    if (pack) return down ? GgmlType::Q3_K : GgmlType::Q2_K;
    return k256 ? (down ? GgmlType::Q6_K : GgmlType::Q4_K) : GgmlType::Q4_0;
  }
  if (ends_with(spec.name, "self_attn.b_proj.weight") && spec.group == ParamGroup::Kda) return GgmlType::F16;
  if (ends_with(spec.name, "f_a_proj.weight") || ends_with(spec.name, "f_b_proj.weight")) return GgmlType::BF16;
  if (!k256) return k % 32 == 0 ? GgmlType::Q8_0 : GgmlType::F16;
  if (spec.group == ParamGroup::Head || down) return GgmlType::Q6_K;
  if (spec.group == ParamGroup::DenseMlp) return GgmlType::Q2_K;
  if (spec.group == ParamGroup::Shared) return GgmlType::Q3_K;
  return GgmlType::Q4_K;
}

struct OutTensor {
  std::string name;
  GgmlType type;
  Shape ne;
  std::vector<uint8_t> bytes;
};

Shape reversed(const Shape& s) { return Shape(s.rbegin(), s.rend()); }

class GgufTinyWriter {
 public:
  GgufTinyWriter(const MasterWeights& m, bool pack) : m_(m), c_(m.config), pack_(pack) {}

  void build() {
    for (const auto& spec : m_.params) add(spec);
  }

  // The kv_b split (spec §5.5): k_b[h][c][d] = kv_b[h·(dn+dv) + d][c], v_b[h][j][c] = kv_b[h·(dn+dv) + dn + j][c].
  void add_split_kv_b(const ParamSpec& spec) {
    const auto& w = m_.at(spec.name);
    const uint64_t heads = c_.mla.num_heads, dn = c_.mla.qk_nope_head_dim, dv = c_.mla.v_head_dim, rkv = c_.mla.kv_lora_rank;
    std::vector<float> k(heads * rkv * dn), v(heads * dv * rkv);
    for (uint64_t h = 0; h < heads; ++h) {
      for (uint64_t c = 0; c < rkv; ++c) {
        for (uint64_t d = 0; d < dn; ++d) k[(h * rkv + c) * dn + d] = w[(h * (dn + dv) + d) * rkv + c];
        for (uint64_t j = 0; j < dv; ++j) v[(h * dv + j) * rkv + c] = w[(h * (dn + dv) + dn + j) * rkv + c];
      }
    }
    const auto [k_name, v_name] = split_kv_b_names(spec.layer);
    out_.push_back({k_name, GgmlType::Q4_0, {dn, rkv, heads}, quantize_tensor(GgmlType::Q4_0, k, dn)});
    out_.push_back({v_name, GgmlType::Q2_K, {rkv, dv, heads}, quantize_tensor(GgmlType::Q2_K, v, rkv)});
  }

  void add(const ParamSpec& spec) {
    const std::string name = gguf_tensor_name(c_, spec);
    const auto& values = m_.at(spec.name);
    if (is_res_norm(spec)) return;  // folded into *_res_score with its projection
    if (is_kv_b(spec) && pack_) return add_split_kv_b(spec);
    if (is_res_proj(spec)) {
      // *_res_score = norm ⊙ proj (the matching norm parameter is "<same prefix>_norm.weight").
      const auto& norm = m_.at(spec.name.substr(0, spec.name.size() - std::string("_proj.weight").size()) + "_norm.weight");
      std::vector<float> product(values.size());
      for (size_t i = 0; i < values.size(); ++i) product[i] = norm[i] * values[i];
      return push(name, GgmlType::F32, {values.size()}, product);
    }
    if (is_a_log(spec)) {
      std::vector<float> neg_exp(values.size());
      for (size_t i = 0; i < values.size(); ++i) neg_exp[i] = -std::exp(values[i]);
      return push(name, GgmlType::F32, {values.size()}, neg_exp);
    }
    const GgmlType type = gguf_write_type(spec, pack_);
    // llama.cpp drops the conv weight's singleton channel dim: [P, 1, W] is stored ne = [W, P].
    push(name, type, reversed(spec.kind == ParamKind::Conv ? squeezed(spec.shape) : spec.shape), values);
    if (pack_ && spec.kind == ParamKind::ExpertBank) bank_of_.emplace(spec.name, out_.size() - 1);
  }

  void push(const std::string& name, GgmlType type, Shape ne, const std::vector<float>& values) {
    out_.push_back({name, type, ne, quantize_tensor(type, values, ne[0])});
  }

  void write(const std::string& dir, const Json& config_doc) {
    const std::string arch = gguf_architecture(c_);
    const size_t per_shard = (out_.size() + kShardCount - 1) / kShardCount;
    std::vector<GgufShardRecord> shards;
    std::vector<GgufTensorRecord> records;
    for (uint32_t s = 0; s < kShardCount; ++s) {
      GgufWriter w;
      w.set("general.architecture", GgufValue{std::string(arch)});
      if (s == 0) {
        w.set("general.name", GgufValue{std::string("k3 make-tiny ") + arch});
        for (const auto& [key, value] : metadata_integers(c_)) w.set(key, GgufValue{static_cast<uint32_t>(value)});
      }
      w.set("split.no", GgufValue{static_cast<uint16_t>(s)});
      w.set("split.count", GgufValue{static_cast<uint16_t>(kShardCount)});
      w.set("split.tensors.count", GgufValue{static_cast<int32_t>(out_.size())});
      for (size_t i = s * per_shard; i < std::min(out_.size(), (s + 1) * per_shard); ++i) {
        w.add_tensor(out_[i].name, out_[i].type, out_[i].ne, out_[i].bytes);
        records.push_back({out_[i].name, s, manifest_dtype_name(out_[i].type)});
      }
      const std::string path = gguf_split_path((fs::path(dir) / kShardPrefix).string(), s + 1, kShardCount);
      w.write(path);
      shards.push_back({s, fs::path(path).filename().string(), fs::file_size(path)});
    }
    write_config_files(dir, config_doc);
    if (!pack_) return;
    KimiPackSource src;
    src.config = &c_;
    src.config_sha256 = sha256_file_hex((fs::path(dir) / "config.json").string());
    for (int64_t layer : moe_layer_ids(c_)) {
      const std::string p = layer_prefix(layer) + "block_sparse_moe.experts.";
      const auto& up = out_[bank_of_.at(p + "w3.weight")].bytes;
      const auto& gate = out_[bank_of_.at(p + "w1.weight")].bytes;
      const auto& down = out_[bank_of_.at(p + "w2.weight")].bytes;
      src.banks.push_back({std::span<const uint8_t>(up), std::span<const uint8_t>(gate), std::span<const uint8_t>(down)});
    }
    src.shards = shards;
    src.tensors = records;
    write_kimi_expert_pack(dir, kPackFileName, src);
  }

 private:
  const MasterWeights& m_;
  const K3Config& c_;
  bool pack_;
  std::vector<OutTensor> out_;
  std::map<std::string, size_t> bank_of_;
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

void write_gguf(bool expert_pack, const MasterWeights& master, Json config_doc, const std::string& out_dir) {
  const K3Config& c = master.config;
  if (expert_pack) {
    if (c.model_type != ModelType::kKimiK3 || !c.moe) {
      throw Error(Where{out_dir, "", ""}, "the Kimi GGML MoE ExpertPack is a Kimi-K3 (MoE) format");
    }
    for (const auto& role : kimi_pack_roles(c)) ggml_row_size(role.type, role.cols, Where{out_dir, "", "expert rows"});
  }
  GgufTinyWriter w(master, expert_pack);
  w.build();
  w.write(out_dir, config_doc);
}

}  // namespace k3::family
