#include <cmath>
#include <fstream>
#include <functional>

#include "error_of.h"
#include "core/numeric.h"
#include "family_test_util.h"
#include "io/safetensors.h"
#include "quant/families/modelopt.h"
#include "quant/families/modelopt_resolve.h"
#include "quant/formats/fp8/fp8.h"
#include "quant/formats/nvfp4/nvfp4.h"

namespace k3 {
namespace {

using modelopt::Resolver;
using test::make_tiny;
using test::plan_headers_only;
using test::problems_text;

// ---- resolution rules (spec §2.2) ---------------------------------------------------------------

using test::error_of;

TEST(ModelOptResolve, AlgosAreComparedUpperCasedAndUnknownOnesAreRejected) {
  EXPECT_EQ(modelopt::known_algo("fp8_pb_wo"), "FP8_PB_WO");
  EXPECT_EQ(modelopt::known_algo("Nvfp4"), "NVFP4");
  EXPECT_EQ(modelopt::known_algo("W4A8_AWQ"), std::nullopt);
  EXPECT_EQ(modelopt::known_algos_text(), "NVFP4, FP8, FP8_PB_WO, MXFP8 or W4A16_NVFP4");
}

TEST(ModelOptResolve, SpellingsCoverPrefixesAndMlpAlias) {
  EXPECT_EQ(modelopt::module_spellings("model.layers.1.block_sparse_moe.experts"),
            (std::vector<std::string>{"model.layers.1.block_sparse_moe.experts",
                                      "language_model.model.layers.1.block_sparse_moe.experts",
                                      "layers.1.block_sparse_moe.experts", "model.layers.1.mlp.experts",
                                      "language_model.model.layers.1.mlp.experts", "layers.1.mlp.experts"}));
  EXPECT_EQ(modelopt::module_spellings("lm_head"), (std::vector<std::string>{"lm_head", "language_model.lm_head"}));
}

TEST(ModelOptResolve, DirectEntryUnderAnySpelling) {
  Resolver r({{"language_model.model.layers.3.self_attn.q_b_proj", "fp8_pb_wo", std::nullopt},
              {"layers.3.mlp.experts", "NVFP4", 16}},
             {});
  EXPECT_EQ(r.resolve("model.layers.3.self_attn.q_b_proj"), "FP8_PB_WO");
  EXPECT_EQ(r.resolve("model.layers.3.block_sparse_moe.experts"), "NVFP4");
  EXPECT_EQ(r.resolve("model.layers.3.self_attn.q_a_proj"), std::nullopt);
  EXPECT_EQ(r.resolve("model.layers.3.self_attn.q_b"), std::nullopt);  // a key is not a prefix match
}

TEST(ModelOptResolve, SpellingsThatDisagreeAreAnError) {
  Resolver r({{"model.layers.3.self_attn.o_proj", "FP8_PB_WO", std::nullopt},
              {"language_model.model.layers.3.self_attn.o_proj", "NVFP4", std::nullopt}},
             {});
  EXPECT_EQ(error_of([&] { r.resolve("model.layers.3.self_attn.o_proj"); }),
            "quant_algo of module 'model.layers.3.self_attn.o_proj' differs between its spellings: "
            "'model.layers.3.self_attn.o_proj' is FP8_PB_WO, 'language_model.model.layers.3.self_attn.o_proj' is NVFP4");
}

TEST(ModelOptResolve, SubtreeTakesTheFirstKeyInFileOrder) {
  Resolver r({{"model.layers.1.mlp.expertsx.0.w1", "FP8", std::nullopt},  // not inside "experts."
              {"language_model.model.layers.1.block_sparse_moe.experts.0.w1", "nvfp4", 16},
              {"model.layers.1.mlp.experts.1.w1", "FP8", std::nullopt}},
             {});
  EXPECT_EQ(r.direct("model.layers.1.block_sparse_moe.experts"), std::nullopt);
  EXPECT_EQ(r.subtree("model.layers.1.block_sparse_moe.experts"), "NVFP4");
  EXPECT_EQ(r.resolve("model.layers.1.block_sparse_moe.experts"), "NVFP4");
  EXPECT_EQ(r.resolve("model.layers.2.block_sparse_moe.experts"), std::nullopt);
}

TEST(ModelOptResolve, GlobIsAFullMatchWithStarOnly) {
  EXPECT_TRUE(modelopt::glob_full_match("*mlp.gate*", "model.layers.1.mlp.gate"));
  EXPECT_TRUE(modelopt::glob_full_match("a*b*c", "a.b.b.c"));
  EXPECT_FALSE(modelopt::glob_full_match("*mlp.gate*", "model.layers.1.mlp.shared_experts.gate_proj"));
  EXPECT_FALSE(modelopt::glob_full_match("lm_head", "language_model.lm_head"));
  EXPECT_FALSE(modelopt::glob_full_match("model.layers.1", "modelxlayersx1"));  // "." is literal
}

TEST(ModelOptResolve, ExclusionFullMatchPerSegmentAndFusedMla) {
  Resolver r({}, {"*block_sparse_moe.gate*", "*layernorm*", "language_model.lm_head", "o_norm",
                  "*self_attn.kv_a_proj_with_mqa", "*self_attn.o_proj"});
  // full match, under the mlp spelling too
  EXPECT_TRUE(r.excluded("model.layers.1.block_sparse_moe.gate"));
  EXPECT_TRUE(r.excluded("model.layers.1.mlp.gate"));
  EXPECT_FALSE(r.excluded("model.layers.1.block_sparse_moe.shared_experts.gate_proj"));
  EXPECT_TRUE(r.excluded("lm_head"));
  // per-segment: a pattern matching one dotted segment
  EXPECT_TRUE(r.excluded("model.layers.0.input_layernorm"));
  EXPECT_TRUE(r.excluded("model.layers.0.self_attn.o_norm"));
  EXPECT_FALSE(r.excluded("model.layers.0.self_attn.o_norm_x"));
  // fused-MLA special case: the MLA tail names a part of the fused module's last segment
  EXPECT_TRUE(r.excluded("model.layers.3.self_attn.kv_a_proj_with_mqa"));
  EXPECT_TRUE(r.excluded("model.layers.3.self_attn.fused_qkv_a_proj_with_mqa"));
  EXPECT_FALSE(r.excluded("model.layers.3.self_attn.fused_o_proj_x"));  // o_proj is not an MLA tail
  EXPECT_FALSE(r.excluded("model.layers.3.self_attn.q_a_proj"));
}

const modelopt::PackedModule& packed(const std::string& fused) {
  for (const auto& p : modelopt::k3_packed_modules()) {
    if (p.fused == fused) return p;
  }
  throw Error("no packed module " + fused);
}

TEST(ModelOptResolve, FusedShardsMustAgree) {
  const std::vector<std::string> qkvg{"q_proj", "k_proj", "v_proj", "g_proj"};
  const std::string base = "model.layers.1.self_attn";
  Resolver agree({{base + ".q_proj", "FP8_PB_WO", {}}, {base + ".k_proj", "fp8_pb_wo", {}}, {base + ".v_proj", "FP8_PB_WO", {}},
                  {base + ".g_proj", "FP8_PB_WO", {}}, {base + ".fused_qkvg_proj", "FP8_PB_WO", {}}},
                 {});
  EXPECT_NO_THROW(agree.check_fused(base, packed("fused_qkvg_proj"), qkvg));

  Resolver shards({{base + ".q_proj", "FP8_PB_WO", {}}, {base + ".k_proj", "NVFP4", {}}, {base + ".v_proj", "FP8_PB_WO", {}}}, {});
  EXPECT_EQ(error_of([&] { shards.check_fused(base, packed("fused_qkvg_proj"), qkvg); }),
            "Mixed quant_algo within fused layer 'model.layers.1.self_attn.fused_qkvg_proj' (q_proj: FP8_PB_WO, "
            "k_proj: NVFP4, v_proj: FP8_PB_WO, g_proj: none). All shards must use the same quantization.");

  Resolver fused_name({{"model.layers.3.self_attn.q_a_proj", "FP8_PB_WO", {}},
                       {"model.layers.3.self_attn.kv_a_proj_with_mqa", "FP8_PB_WO", {}},
                       {"layers.3.self_attn.fused_qkv_a_proj_with_mqa", "FP8", {}}},
                      {});
  EXPECT_EQ(error_of([&] {
              fused_name.check_fused("model.layers.3.self_attn", packed("fused_qkv_a_proj_with_mqa"), {"q_a_proj", "kv_a_proj_with_mqa"});
            }),
            "Mixed quant_algo within fused layer 'model.layers.3.self_attn.fused_qkv_a_proj_with_mqa' "
            "(fused_qkv_a_proj_with_mqa: FP8, q_a_proj: FP8_PB_WO, kv_a_proj_with_mqa: FP8_PB_WO). "
            "All shards must use the same quantization.");

  Resolver partly({{base + ".q_proj", "FP8_PB_WO", {}}}, {"*self_attn.g_proj*"});
  EXPECT_EQ(error_of([&] { partly.check_fused(base, packed("fused_qkvg_proj"), qkvg); }),
            "Some but not all shards of fused layer 'model.layers.1.self_attn.fused_qkvg_proj' are excluded "
            "(excluded: g_proj; quantizable: q_proj, k_proj, v_proj). All shards must use the same precision.");
}

// ---- the families over make-tiny checkpoints --------------------------------------------------

// The algo the recipe gives a parameter ("" = unquantized), restated from spec §2.5.
std::string expected_algo(FamilyId variant, const ParamSpec& spec) {
  if (modelopt::never_quantized(spec)) return "";
  if (spec.group == ParamGroup::Experts) return variant == FamilyId::ModelOptFp8 ? "FP8" : "NVFP4";
  if (spec.group == ParamGroup::Kda || spec.group == ParamGroup::Mla) {
    return variant == FamilyId::ModelOptMixed ? "FP8_PB_WO" : variant == FamilyId::ModelOptNvfp4 ? "NVFP4" : "FP8";
  }
  return "";
}

float amax(const float* w, size_t n) {
  float a = 0.0f;
  for (size_t i = 0; i < n; ++i) a = std::max(a, std::fabs(w[i]));
  return a;
}

// The producer's quantization of the master, dequantized with the reference (spec §2.3–§2.4).
std::vector<float> expected_values(const MasterWeights& master, const ParamSpec& spec, const std::string& algo) {
  const std::vector<float>& v = master.at(spec.name);
  if (algo.empty()) return {};
  const int64_t n = static_cast<int64_t>(spec.shape[spec.shape.size() - 2]), k = static_cast<int64_t>(spec.shape.back());
  const int64_t units = spec.kind == ParamKind::ExpertBank ? static_cast<int64_t>(spec.shape[0]) : 1;
  std::vector<float> out(v.size());
  for (int64_t u = 0; u < units; ++u) {
    const float* w = v.data() + u * n * k;
    float* o = out.data() + u * n * k;
    if (algo == "NVFP4") {
      float a = amax(w, n * k);
      const std::string& name = spec.name;
      const bool gate_up = name.find("experts.w1.") != std::string::npos || name.find("experts.w3.") != std::string::npos;
      if (gate_up) {  // w1 and w3 share one weight_scale_2
        const std::string stem = name.substr(0, name.size() - 9);
        a = std::max(amax(master.at(stem + "w1.weight").data() + u * n * k, n * k),
                     amax(master.at(stem + "w3.weight").data() + u * n * k, n * k));
      }
      const float g = nvfp4_global_scale(a);
      std::vector<uint8_t> packed(n * k / 2), scales(n * k / 16);
      quantize_nvfp4(w, n, k, g, packed.data(), scales.data());
      dequant_nvfp4(packed.data(), scales.data(), g, n, k, o);
    } else {
      const bool block = algo == "FP8_PB_WO";
      const int64_t bn = block ? 128 : n, bk = block ? 128 : k;
      std::vector<uint8_t> q(n * k);
      std::vector<float> s(((n + bn - 1) / bn) * ((k + bk - 1) / bk));
      quantize_fp8_block(w, n, k, bn, bk, q.data(), s.data());
      dequant_fp8_block(q.data(), s.data(), n, k, bn, bk, o);
    }
  }
  if (algo == "FP8_PB_WO" && modelopt::dequantized_at_load(spec.name)) {
    for (float& x : out) x = decode_bf16(encode_bf16(x));
  }
  return out;
}

SchemeKind expected_kind(const std::string& algo) {
  if (algo == "NVFP4") return SchemeKind::Nvfp4;
  if (algo == "FP8_PB_WO") return SchemeKind::Fp8Block;
  return algo == "FP8" ? SchemeKind::Fp8Tensor : SchemeKind::Dense;
}

float scalar(const SourceTensor& t, PlanFiles& files) {
  const auto v = decode_source(t, files);
  EXPECT_EQ(v.size(), 1u) << t.name;
  return v.at(0);
}

void expect_family_exact(FamilyId variant, TinyArch arch) {
  auto t = make_tiny(variant, arch);
  const LoadPlan plan = plan_headers_only(t.dir);
  ASSERT_TRUE(plan.ok()) << problems_text(plan);
  EXPECT_EQ(plan.family, family_name(variant));
  EXPECT_FALSE(plan.caps.quantized_latent_projections);
  EXPECT_FALSE(plan.caps.split_gguf_kv_b);
  EXPECT_FALSE(plan.caps.experts_from_pack);
  ASSERT_EQ(plan.bindings.size(), t.master.params.size());
  PlanFiles files(plan);
  int quantized = 0;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const ParamSpec& spec = plan.params[i];
    const Binding& b = plan.bindings[i];
    const std::string algo = expected_algo(variant, spec);
    ASSERT_EQ(b.scheme.kind, expected_kind(algo)) << spec.name;
    const auto got = materialize(b, spec, files);
    std::vector<float> want = expected_values(t.master, spec, algo);
    if (algo.empty()) {
      want = t.master.at(spec.name);
      if (b.scheme.storage != "F32") {
        for (float& x : want) x = decode_bf16(encode_bf16(x));
      }
    } else {
      ++quantized;
    }
    ASSERT_EQ(got.size(), want.size()) << spec.name;
    for (size_t j = 0; j < want.size(); ++j) ASSERT_EQ(got[j], want[j]) << spec.name << "[" << j << "]";

    const bool tiny = algo == "FP8_PB_WO" && modelopt::dequantized_at_load(spec.name);
    std::vector<Transform> transforms;
    if (algo == "FP8_PB_WO") transforms.push_back(Transform::SqueezeScale4D);
    if (tiny) transforms.push_back(Transform::DequantToBf16);
    if (!algo.empty()) {
      EXPECT_EQ(b.transforms, transforms) << spec.name;
    }
    if (algo == "NVFP4" || algo == "FP8") {
      const float input = algo == "NVFP4" ? modelopt::kNvfp4InputScale : modelopt::kFp8InputScale;
      for (const auto& s : b.part("input_scale")->tensors) ASSERT_EQ(scalar(s, files), input) << s.name;
      EXPECT_NE(input, 1.0f);
    }
  }
  EXPECT_GT(quantized, 0);
  // w1 and w3 of every expert share one weight_scale_2, and it is not 1 (spec §3).
  if (variant == FamilyId::ModelOptFp8) return;
  int checked = 0;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const std::string& name = plan.params[i].name;
    if (name.find("experts.w1.weight") == std::string::npos) continue;
    const auto& w1 = plan.bindings[i].part("weight_scale_2")->tensors;
    const auto& w3 = plan.bindings[plan.index_of(name.substr(0, name.size() - 9) + "w3.weight")].part("weight_scale_2")->tensors;
    ASSERT_EQ(w1.size(), w3.size());
    for (size_t e = 0; e < w1.size(); ++e) {
      const float s1 = scalar(w1[e], files), s3 = scalar(w3[e], files);
      EXPECT_EQ(s1, s3) << w1[e].name;
      EXPECT_NE(s1, 1.0f) << w1[e].name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(ModelOptFamily, MixedKimiK3IsExact) { expect_family_exact(FamilyId::ModelOptMixed, TinyArch::KimiK3); }
TEST(ModelOptFamily, MixedKimiLinearIsExact) { expect_family_exact(FamilyId::ModelOptMixed, TinyArch::KimiLinear); }
TEST(ModelOptFamily, Nvfp4KimiK3IsExact) { expect_family_exact(FamilyId::ModelOptNvfp4, TinyArch::KimiK3); }
TEST(ModelOptFamily, Nvfp4KimiLinearIsExact) { expect_family_exact(FamilyId::ModelOptNvfp4, TinyArch::KimiLinear); }
TEST(ModelOptFamily, Fp8KimiK3IsExact) { expect_family_exact(FamilyId::ModelOptFp8, TinyArch::KimiK3); }
TEST(ModelOptFamily, Fp8KimiLinearIsExact) { expect_family_exact(FamilyId::ModelOptFp8, TinyArch::KimiLinear); }

// ---- rewritten checkpoints --------------------------------------------------------------------

Json read_json(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

void write_json(const std::string& path, const Json& doc) {
  std::ofstream out(path);
  out << doc.dump(2);
}

// A single-file copy of a checkpoint with its config files; `edit` may rename (return a new name),
// drop (return "") or reshape a tensor.
using TensorEdit = std::function<std::string(const std::string& name, std::vector<uint64_t>& shape)>;
void copy_checkpoint(const std::string& src, const std::string& dst, const TensorEdit& edit) {
  std::filesystem::remove_all(dst);
  std::filesystem::create_directories(dst);
  for (const char* f : {"config.json", "hf_quant_config.json"}) {
    if (std::filesystem::exists(src + "/" + f)) std::filesystem::copy_file(src + "/" + f, dst + "/" + f);
  }
  const auto ckpt = SafetensorsCheckpoint::open(src);
  SafetensorsWriter w;
  for (const auto& e : ckpt.entries()) {
    const auto& info = ckpt.info(e);
    std::vector<uint64_t> shape = info.shape;
    const std::string name = edit ? edit(info.name, shape) : info.name;
    if (name.empty()) continue;
    auto bytes = ckpt.data(e);
    w.add(name, info.dtype, shape, std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }
  w.write(dst + "/model.safetensors");
}

// Same parameters, schemes, source tensor names and transforms.
void expect_same_bindings(const LoadPlan& a, const LoadPlan& b) {
  ASSERT_EQ(a.bindings.size(), b.bindings.size());
  for (size_t i = 0; i < a.bindings.size(); ++i) {
    const Binding &x = a.bindings[i], &y = b.bindings[i];
    ASSERT_EQ(x.scheme, y.scheme) << x.param;
    ASSERT_EQ(x.transforms, y.transforms) << x.param;
    ASSERT_EQ(x.parts.size(), y.parts.size()) << x.param;
    for (size_t p = 0; p < x.parts.size(); ++p) {
      ASSERT_EQ(x.parts[p].tensors.size(), y.parts[p].tensors.size()) << x.param;
      for (size_t j = 0; j < x.parts[p].tensors.size(); ++j) ASSERT_EQ(x.parts[p].tensors[j].name, y.parts[p].tensors[j].name);
    }
  }
}

TEST(ModelOptFamily, FlatConfigJsonFormPlansLikeTheNestedFile) {
  auto t = make_tiny(FamilyId::ModelOptMixed, TinyArch::KimiK3);
  const LoadPlan nested = plan_headers_only(t.dir);
  ASSERT_TRUE(nested.ok()) << problems_text(nested);

  const std::string flat_dir = ::testing::TempDir() + "/k3_modelopt_flat";
  copy_checkpoint(t.dir, flat_dir, nullptr);
  const Json hf = read_json(flat_dir + "/hf_quant_config.json");
  std::filesystem::remove(flat_dir + "/hf_quant_config.json");
  Json config = read_json(flat_dir + "/config.json");
  config["quantization_config"] = {{"quant_method", "modelopt_mixed"},
                                   {"quant_algo", "MIXED_PRECISION"},
                                   {"kv_cache_scheme", nullptr},
                                   {"quantized_layers", hf["quantization"]["quantized_layers"]},
                                   {"ignore", hf["quantization"]["exclude_modules"]},
                                   {"producer", hf["producer"]}};
  write_json(flat_dir + "/config.json", config);
  const LoadPlan flat = plan_headers_only(flat_dir);
  ASSERT_TRUE(flat.ok()) << problems_text(flat);
  EXPECT_EQ(flat.family, "modelopt-mixed");
  expect_same_bindings(nested, flat);

  // An inline config without quantized_layers defers to hf_quant_config.json (spec §2.1).
  const std::string defer_dir = ::testing::TempDir() + "/k3_modelopt_defer";
  copy_checkpoint(t.dir, defer_dir, nullptr);
  config["quantization_config"].erase("quantized_layers");
  write_json(defer_dir + "/config.json", config);
  const LoadPlan deferred = plan_headers_only(defer_dir);
  ASSERT_TRUE(deferred.ok()) << problems_text(deferred);
  expect_same_bindings(nested, deferred);
}

// A copy of the mixed checkpoint whose hf_quant_config.json quantization section is edited.
std::string with_quant_edit(const test::TinyCheckpoint& t, const std::string& name, const std::function<void(Json&)>& edit,
                            const TensorEdit& tensors = nullptr) {
  const std::string dir = ::testing::TempDir() + "/k3_modelopt_" + name;
  copy_checkpoint(t.dir, dir, tensors);
  Json hf = read_json(dir + "/hf_quant_config.json");
  edit(hf["quantization"]);
  write_json(dir + "/hf_quant_config.json", hf);
  return dir;
}

// Sets (or removes, when algo is empty) every key of quantized_layers that spells `module`.
void set_module_algo(Json& q, const std::string& module, const std::string& algo) {
  for (const std::string& s : modelopt::module_spellings(module)) {
    if (!q["quantized_layers"].contains(s)) continue;
    if (algo.empty()) {
      q["quantized_layers"].erase(s);
    } else {
      q["quantized_layers"][s]["quant_algo"] = algo;
    }
  }
}

TEST(ModelOptFamily, FusedAliasThatDisagreesWithItsShardsIsAnError) {
  auto t = make_tiny(FamilyId::ModelOptMixed, TinyArch::KimiK3);
  const std::string dir = with_quant_edit(t, "fused_alias", [](Json& q) { set_module_algo(q, "model.layers.1.self_attn.fused_qkvg_proj", "NVFP4"); });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 1u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(),
            dir + "/hf_quant_config.json: field 'quantization.quantized_layers': Mixed quant_algo within fused layer "
                  "'model.layers.1.self_attn.fused_qkvg_proj' (fused_qkvg_proj: NVFP4, q_proj: FP8_PB_WO, k_proj: FP8_PB_WO, "
                  "v_proj: FP8_PB_WO, g_proj: FP8_PB_WO). All shards must use the same quantization.");
}

TEST(ModelOptFamily, FusedShardsThatDisagreeAreAnError) {
  auto t = make_tiny(FamilyId::ModelOptMixed, TinyArch::KimiK3);
  const std::string dir = with_quant_edit(t, "fused_shards", [](Json& q) { set_module_algo(q, "model.layers.3.self_attn.kv_a_proj_with_mqa", "FP8"); });
  const LoadPlan plan = plan_headers_only(dir);
  const std::string mixed = dir + "/hf_quant_config.json: field 'quantization.quantized_layers': Mixed quant_algo within fused layer "
                                  "'model.layers.3.self_attn.fused_qkv_a_proj_with_mqa' (fused_qkv_a_proj_with_mqa: FP8_PB_WO, "
                                  "q_a_proj: FP8_PB_WO, kv_a_proj_with_mqa: FP8). All shards must use the same quantization.";
  // kv_a now binds per-tensor FP8, so its block-FP8 tensors do not fit that layout either.
  ASSERT_EQ(plan.problems.size(), 3u) << problems_text(plan);
  const std::string kv_a = "model.layers.3.self_attn.kv_a_proj_with_mqa";
  EXPECT_EQ(plan.problems[0].text(), dir + "/model.safetensors: tensor 'language_model." + kv_a + ".weight_scale': field 'shape': "
                                           "shape [3, 1, 2, 1] is not [] (FP8 weight_scale of parameter '" + kv_a + ".weight')");
  EXPECT_EQ(plan.problems[1].text(), dir + "/model.safetensors: parameter '" + kv_a + ".weight': missing tensor '" + kv_a + ".input_scale'");
  EXPECT_EQ(plan.problems[2].text(), mixed);
}

TEST(ModelOptFamily, UnknownQuantAlgoIsAnErrorNotUnquantized) {
  auto t = make_tiny(FamilyId::ModelOptMixed, TinyArch::KimiLinear);
  const std::string dir = with_quant_edit(t, "unknown_algo", [](Json& q) { set_module_algo(q, "model.layers.1.block_sparse_moe.experts", "nvfp5"); });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 2u) << problems_text(plan);
  const std::string file = dir + "/hf_quant_config.json: field 'quantization.quantized_layers";
  const std::string expect = "': unknown quant_algo 'nvfp5' (expected NVFP4, FP8, FP8_PB_WO, MXFP8 or W4A16_NVFP4)";
  EXPECT_EQ(plan.problems[0].text(), file + "[\"model.layers.1.block_sparse_moe.experts\"].quant_algo" + expect);
  EXPECT_EQ(plan.problems[1].text(), file + "[\"model.layers.1.mlp.experts\"].quant_algo" + expect);
}

TEST(ModelOptFamily, SpellingsThatDisagreeAreReportedOnce) {
  auto t = make_tiny(FamilyId::ModelOptMixed, TinyArch::KimiLinear);
  const std::string dir = with_quant_edit(t, "spellings", [](Json& q) { q["quantized_layers"]["model.layers.1.mlp.experts"]["quant_algo"] = "FP8"; });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 1u) << problems_text(plan);  // three banks meet it; their tensors are consumed
  EXPECT_EQ(plan.problems[0].text(), dir + "/hf_quant_config.json: field 'quantization.quantized_layers': quant_algo of module "
                                           "'model.layers.1.block_sparse_moe.experts' differs between its spellings: "
                                           "'model.layers.1.block_sparse_moe.experts' is NVFP4, 'model.layers.1.mlp.experts' is FP8");
}

TEST(ModelOptFamily, MissingScaleTensorIsReported) {
  auto t = make_tiny(FamilyId::ModelOptMixed, TinyArch::KimiK3);
  const std::string dir = with_quant_edit(t, "missing_scale", [](Json&) {}, [](const std::string& name, std::vector<uint64_t>&) {
    return name == "language_model.model.layers.2.block_sparse_moe.experts.3.w3.weight_scale_2" ? std::string() : name;
  });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 1u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(), dir + "/model.safetensors: parameter 'model.layers.2.block_sparse_moe.experts.w3.weight': "
                                           "missing tensor 'model.layers.2.block_sparse_moe.experts.3.w3.weight_scale_2'");
}

TEST(ModelOptFamily, WrongScaleShapeIsReported) {
  auto t = make_tiny(FamilyId::ModelOptMixed, TinyArch::KimiK3);
  const std::string dir = with_quant_edit(t, "scale_shape", [](Json&) {}, [](const std::string& name, std::vector<uint64_t>& shape) {
    if (name == "language_model.model.layers.1.self_attn.o_proj.weight_scale") shape = {shape[2], 1, shape[0], 1};  // transposed grid
    if (name == "language_model.model.layers.1.block_sparse_moe.experts.0.w2.weight_scale") shape = {shape[1], shape[0]};
    return name;
  });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 2u) << problems_text(plan);
  const std::string file = dir + "/model.safetensors: tensor 'language_model.model.layers.1.";
  EXPECT_EQ(plan.problems[0].text(), file + "self_attn.o_proj.weight_scale': field 'shape': shape [1, 1, 2, 1] is not [2, 1, 1, 1] or "
                                            "[2, 1] (FP8_PB_WO weight_scale of parameter 'model.layers.1.self_attn.o_proj.weight')");
  EXPECT_EQ(plan.problems[1].text(), file + "block_sparse_moe.experts.0.w2.weight_scale': field 'shape': shape [16, 256] is not "
                                            "[256, 16] (NVFP4 weight_scale of parameter 'model.layers.1.block_sparse_moe.experts.w2.weight')");
}

TEST(ModelOptFamily, ScaleOfAModuleWithNoAlgoIsModuleNameDrift) {
  auto t = make_tiny(FamilyId::ModelOptMixed, TinyArch::KimiK3);
  // The manifest's entry for o_proj is gone (as if its key had been renamed): the FP8 tensors remain.
  const std::string dir = with_quant_edit(t, "drift", [](Json& q) { set_module_algo(q, "model.layers.2.self_attn.o_proj", ""); });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 2u) << problems_text(plan);
  const std::string file = dir + "/model.safetensors: tensor 'language_model.model.layers.2.self_attn.o_proj.";
  EXPECT_EQ(plan.problems[0].text(), file + "weight': field 'dtype': dtype F8_E4M3 is not a float type, but parameter "
                                            "'model.layers.2.self_attn.o_proj.weight' is unquantized");
  EXPECT_EQ(plan.problems[1].text(), file + "weight_scale': module 'model.layers.2.self_attn.o_proj' is unquantized (resolves to "
                                            "no quant_algo) but the checkpoint has its weight_scale: module-name drift, not loaded as BF16");
}

TEST(ModelOptFamily, MixedPrecisionWithEmptyQuantizedLayersIsRejected) {
  auto t = make_tiny(FamilyId::ModelOptMixed, TinyArch::KimiLinear);
  const std::string dir = with_quant_edit(t, "empty_layers", [](Json& q) { q["quantized_layers"] = Json::object(); });
  EXPECT_EQ(error_of([&] { plan_checkpoint(dir); }),
            dir + "/hf_quant_config.json: field 'quantization.quantized_layers': MIXED_PRECISION needs a non-empty quantized_layers");
}

// Decision: an entry for a module ModelOpt never quantizes (router, latent projections, lm_head) is
// ignored, as sglang builds those modules without a quant config; the module binds BF16.
TEST(ModelOptFamily, EntryForANeverQuantizedModuleIsIgnored) {
  auto t = make_tiny(FamilyId::ModelOptMixed, TinyArch::KimiK3);
  const std::string dir = with_quant_edit(t, "router_entry", [](Json& q) {
    q["quantized_layers"]["language_model.model.layers.1.block_sparse_moe.routed_expert_down_proj"] = {{"quant_algo", "NVFP4"}};
    q["quantized_layers"]["language_model.model.layers.1.block_sparse_moe.gate"] = {{"quant_algo", "FP8_PB_WO"}};
  });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_TRUE(plan.ok()) << problems_text(plan);
  for (const char* p : {"model.layers.1.block_sparse_moe.routed_expert_down_proj.weight", "model.layers.1.block_sparse_moe.gate.weight"}) {
    EXPECT_EQ(plan.bindings[plan.index_of(p)].scheme.kind, SchemeKind::Dense) << p;
  }
}

}  // namespace
}  // namespace k3
