// compressed-tensors family: the native Kimi-K3 MXFP4 release layout (make-tiny → plan → exact
// dequant), the release config fixture, the module rule (ignore / targets / tensors), and every
// problem with its exact text.
#include "quant/families/compressed_tensors.h"

#include "io/json.h"
#include "quant/formats/mxfp4/mxfp4.h"
#include "quantized_test_util.h"

namespace k3 {
namespace {

using test::make_tiny;
using test::plan_headers_only;
using test::problems_text;
using test::rewrite_checkpoint;
using test::StoredTensor;
using test::Tensors;

// MXFP4 of the master as the release's producer writes it, through the reference dequant.
std::vector<float> mxfp4_roundtrip(const std::vector<float>& master, uint64_t matrices, uint64_t n, uint64_t k) {
  std::vector<float> out(master.size());
  std::vector<uint8_t> packed(n * k / 2), scales(n * k / 32);
  for (uint64_t e = 0; e < matrices; ++e) {
    quantize_mxfp4(master.data() + e * n * k, n, k, packed.data(), scales.data());
    dequant_mxfp4(packed.data(), scales.data(), n, k, out.data() + e * n * k);
  }
  return out;
}

std::optional<std::vector<float>> release_expected(const MasterWeights& master, const ParamSpec& spec, const Binding& b) {
  if (!ct_mxfp4_release_packs(spec)) return std::nullopt;
  EXPECT_EQ(b.scheme.name(), "MXFP4/g32") << spec.name;
  EXPECT_EQ(b.parts.at(0).tensors.size(), spec.shape[0]) << spec.name;
  return mxfp4_roundtrip(master.at(spec.name), spec.shape[0], spec.shape[1], spec.shape[2]);
}

TEST(CompressedTensorsFamily, EveryParameterIsTheReleaseQuantizationOfTheMaster) {
  for (TinyArch arch : {TinyArch::KimiK3, TinyArch::KimiLinear}) {
    auto t = make_tiny(FamilyId::CompressedTensorsMxfp4, arch);
    const LoadPlan plan = plan_headers_only(t.dir);
    ASSERT_TRUE(plan.ok()) << problems_text(plan);
    EXPECT_EQ(plan.family, "compressed-tensors-mxfp4");
    EXPECT_TRUE(plan.caps.quantized_latent_projections);
    EXPECT_FALSE(plan.caps.split_gguf_kv_b);
    EXPECT_FALSE(plan.caps.experts_from_pack);
    test::expect_every_parameter(
        plan, t.master, [&](const ParamSpec& s, const Binding& b) { return release_expected(t.master, s, b); }, 0.2);
  }
}

TEST(CompressedTensorsFamily, ReleaseConfigFixtureParsesAndMakeTinyWritesItsStructure) {
  const std::string path = std::string(K3_SHARED_DIR) + "/fixtures/real-configs/kimi-k3.config.json";
  const JsonNode root = load_json_file(path);
  const std::optional<InlineQuantConfig> q = parse_inline_quant_config(root);
  ASSERT_TRUE(q.has_value());
  const auto* ct = std::get_if<CompressedTensorsConfig>(&*q);
  ASSERT_NE(ct, nullptr);
  EXPECT_EQ(ct->origin.path, "text_config.quantization_config");
  const CtModuleRules rules(*ct);
  const std::string p = "language_model.model.layers.7.";
  const ModuleRule expert = rules.rule(p + "block_sparse_moe.experts.895.w2");
  EXPECT_EQ(expert.keeps_dense, "");
  EXPECT_EQ(expert.layout.scheme.name(), "MXFP4/g32");
  EXPECT_EQ(expert.layout.weight_suffix, "weight_packed");
  EXPECT_EQ(expert.layout.scale_suffix, "weight_scale");
  // Not ignored, so they may be packed; the release stores them BF16 and the tensors decide.
  EXPECT_EQ(rules.rule(p + "block_sparse_moe.routed_expert_down_proj").keeps_dense, "");
  EXPECT_EQ(rules.rule(p + "self_attn.q_proj").keeps_dense, "ignored by 're:.*self_attn.*'");
  EXPECT_EQ(rules.rule(p + "block_sparse_moe.shared_experts.up_proj").keeps_dense, "ignored by 're:.*shared_experts.*'");
  EXPECT_EQ(rules.rule("language_model.model.layers.0.mlp.gate_up_proj").keeps_dense,
            "ignored by 're:.*mlp\\.(gate|up|gate_up|down)_proj.*'");
  EXPECT_EQ(rules.rule("language_model.lm_head").keeps_dense, "ignored by 're:.*lm_head.*'");

  const Json release = Json::parse(std::ifstream(path))["text_config"]["quantization_config"];
  EXPECT_EQ(ct_mxfp4_release_quantization_config(), release);
  auto k3 = make_tiny(FamilyId::CompressedTensorsMxfp4, TinyArch::KimiK3);
  const Json k3_config = test::read_config(k3.dir);
  EXPECT_FALSE(k3_config.contains("quantization_config"));
  EXPECT_EQ(k3_config["text_config"]["quantization_config"], release);
  auto linear = make_tiny(FamilyId::CompressedTensorsMxfp4, TinyArch::KimiLinear);
  EXPECT_EQ(test::read_config(linear.dir)["quantization_config"], release);
}

// Regexes match from the start of the name, like Python's re.match; exact names beat regexes,
// regexes beat classes; a module no group targets stays dense.
TEST(CompressedTensorsFamily, TargetsAndIgnoreMatchLikeCompressedTensors) {
  Json q = ct_mxfp4_release_quantization_config();
  q["ignore"] = Json::array({"self_attn", "re:experts\\.1\\.", "model.layers.2.mlp.experts.0.w1"});
  Json fp8_group = ct_fp8_block_quantization_config()["config_groups"]["group_0"];
  fp8_group["targets"] = Json::array({"re:.*o_proj$", "model.layers.1.self_attn.q_proj"});
  q["config_groups"]["group_1"] = fp8_group;
  q["config_groups"]["group_0"]["targets"] = Json::array({"Linear", "re:.*experts.*"});
  q["format"] = "mixed-precision";  // what compressed-tensors writes when the groups' formats differ
  const JsonNode node = parse_json(Json{{"quantization_config", q}}.dump(), "config.json");
  const auto config = std::get<CompressedTensorsConfig>(*parse_inline_quant_config(node));
  const CtModuleRules rules(config);
  EXPECT_EQ(rules.rule("model.layers.1.self_attn.q_proj").layout.scheme.name(), "FP8_BLOCK128x128");  // exact name
  EXPECT_EQ(rules.rule("model.layers.1.self_attn.q_proj").keeps_dense, "");  // "self_attn" is no regex: exact only
  EXPECT_EQ(rules.rule("model.layers.1.self_attn.o_proj").layout.scheme.name(), "FP8_BLOCK128x128");  // regex > class
  EXPECT_EQ(rules.rule("model.layers.1.self_attn.k_proj").layout.scheme.name(), "MXFP4/g32");         // class
  EXPECT_EQ(rules.rule("model.layers.1.mlp.experts.1.w1").keeps_dense, "");  // not at the start of the name
  EXPECT_EQ(rules.rule("experts.1.w1").keeps_dense, "ignored by 're:experts\\.1\\.'");
  EXPECT_EQ(rules.rule("model.layers.2.mlp.experts.0.w1").keeps_dense, "ignored by 'model.layers.2.mlp.experts.0.w1'");

  q["config_groups"].erase("group_0");
  const JsonNode only_fp8 = parse_json(Json{{"quantization_config", q}}.dump(), "config.json");
  const CtModuleRules narrow(std::get<CompressedTensorsConfig>(*parse_inline_quant_config(only_fp8)));
  EXPECT_EQ(narrow.rule("model.layers.1.self_attn.k_proj").keeps_dense, "targeted by no config group");
}

// The release's config does not ignore the latent projections: stored packed, they bind MXFP4.
TEST(CompressedTensorsFamily, PackedLatentProjectionIsAllowedAndExact) {
  auto t = make_tiny(FamilyId::CompressedTensorsMxfp4, TinyArch::KimiK3);
  const std::string param = "model.layers.1.block_sparse_moe.routed_expert_down_proj.weight";
  const ParamSpec& spec = t.master.spec(param);
  const uint64_t n = spec.shape[0], k = spec.shape[1];
  const std::string dir = rewrite_checkpoint(t.dir, "k3_ct_latent_packed", [&](Tensors& ts) {
    test::drop_tensor(ts, "language_model." + param);
    std::vector<uint8_t> packed(n * k / 2), scales(n * k / 32);
    quantize_mxfp4(t.master.at(param).data(), n, k, packed.data(), scales.data());
    const std::string m = "language_model.model.layers.1.block_sparse_moe.routed_expert_down_proj.";
    ts.push_back({m + "weight_packed", Dtype::U8, {n, k / 2}, packed});
    ts.push_back({m + "weight_scale", Dtype::U8, {n, k / 32}, scales});
  });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_TRUE(plan.ok()) << problems_text(plan);
  test::expect_every_parameter(
      plan, t.master,
      [&](const ParamSpec& s, const Binding& b) -> std::optional<std::vector<float>> {
        if (s.name == param) {
          EXPECT_EQ(b.scheme.name(), "MXFP4/g32");
          return mxfp4_roundtrip(t.master.at(param), 1, n, k);
        }
        return release_expected(t.master, s, b);
      },
      0.2);
}

TEST(CompressedTensorsFamily, EveryTensorProblemIsReportedWithItsExactText) {
  auto t = make_tiny(FamilyId::CompressedTensorsMxfp4, TinyArch::KimiK3);
  const std::string L = "language_model.model.layers.";
  const std::string dir = rewrite_checkpoint(t.dir, "k3_ct_problems", [&](Tensors& ts) {
    // A packed module the config ignores (shapes and dtypes right: only the conflict is reported).
    const ParamSpec& q = t.master.spec("model.layers.1.self_attn.q_proj.weight");
    std::vector<uint8_t> packed(q.numel() / 2), scales(q.numel() / 32);
    quantize_mxfp4(t.master.at(q.name).data(), q.shape[0], q.shape[1], packed.data(), scales.data());
    test::drop_tensor(ts, L + "1.self_attn.q_proj.weight");
    ts.push_back({L + "1.self_attn.q_proj.weight_packed", Dtype::U8, {q.shape[0], q.shape[1] / 2}, packed});
    ts.push_back({L + "1.self_attn.q_proj.weight_scale", Dtype::U8, {q.shape[0], q.shape[1] / 32}, scales});
    // Expert 0 of layer 1 w1 packed AND dense.
    ts.push_back({L + "1.block_sparse_moe.experts.0.w1.weight", Dtype::BF16, {256, 256}, std::vector<uint8_t>(256 * 256 * 2)});
    // Expert 3 without its scale.
    test::drop_tensor(ts, L + "1.block_sparse_moe.experts.3.w1.weight_scale");
    // Wrong scale shape, wrong packed dtype, wrong scale dtype.
    auto& shape = test::tensor_named(ts, L + "2.block_sparse_moe.experts.0.w2.weight_scale");
    shape.shape = {256, 16};
    shape.bytes.resize(256 * 16);
    test::tensor_named(ts, L + "3.block_sparse_moe.experts.5.w3.weight_packed").dtype = Dtype::I8;
    test::tensor_named(ts, L + "4.block_sparse_moe.experts.1.w1.weight_scale").dtype = Dtype::F8_E4M3;
    // An expert the config does not have.
    ts.push_back({L + "1.block_sparse_moe.experts.8.w1.weight_packed", Dtype::U8, {256, 128}, std::vector<uint8_t>(256 * 128)});
  });
  const LoadPlan plan = plan_headers_only(dir);
  const std::string f = dir + "/model.safetensors: ";
  const std::vector<std::string> want = {
      f + "tensor '" + L + "1.self_attn.q_proj.weight_packed': module '" + L +
          "1.self_attn.q_proj' is stored quantized, but the quantization config keeps it unquantized (ignored by 're:.*self_attn.*')",
      f + "tensor '" + L + "1.block_sparse_moe.experts.0.w1.weight': module '" + L +
          "1.block_sparse_moe.experts.0.w1' has both a quantized 'weight_packed' and an unquantized 'weight' tensor",
      f + "parameter 'model.layers.1.block_sparse_moe.experts.w1.weight': missing tensor "
          "'model.layers.1.block_sparse_moe.experts.3.w1.weight_scale'",
      f + "tensor '" + L + "2.block_sparse_moe.experts.0.w2.weight_scale': field 'shape': shape [256, 16] does not match the "
          "MXFP4/g32 weight_scale of parameter 'model.layers.2.block_sparse_moe.experts.w2.weight' (expected [256, 8])",
      f + "tensor '" + L + "3.block_sparse_moe.experts.5.w3.weight_packed': field 'dtype': dtype I8 does not match the "
          "MXFP4/g32 weight_packed of parameter 'model.layers.3.block_sparse_moe.experts.w3.weight' (expected U8)",
      f + "tensor '" + L + "4.block_sparse_moe.experts.1.w1.weight_scale': field 'dtype': dtype F8_E4M3 does not match the "
          "MXFP4/g32 weight_scale of parameter 'model.layers.4.block_sparse_moe.experts.w1.weight' (expected U8 or F8_E8M0)",
      f + "tensor '" + L + "1.block_sparse_moe.experts.8.w1.weight_packed': tensor binds to no parameter (unknown or renamed module)",
  };
  ASSERT_EQ(plan.problems.size(), want.size()) << problems_text(plan);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(plan.problems[i].text(), want[i]);
}

// Config errors are thrown at the key, before any tensor is looked at.
std::string plan_error(const std::string& dir) {
  try {
    plan_checkpoint(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(CompressedTensorsFamily, UnservableConfigsFailAtTheirKey) {
  auto t = make_tiny(FamilyId::CompressedTensorsMxfp4, TinyArch::KimiK3);
  const auto with = [&](const std::string& name, const std::function<void(Json&)>& edit) {
    const std::string dir = rewrite_checkpoint(t.dir, name, {}, [&](Json& c) { edit(c["text_config"]["quantization_config"]); });
    return std::pair{dir + "/config.json: field 'text_config.quantization_config.", plan_error(dir)};
  };
  auto [f1, e1] = with("k3_ct_method", [](Json& q) { q["quant_method"] = "awq"; });
  EXPECT_EQ(e1, f1 + "quant_method': unknown quant_method 'awq'");
  auto [f2, e2] = with("k3_ct_format", [](Json& q) {
    q["format"] = "nvfp4-pack-quantized";
    q["config_groups"]["group_0"]["format"] = "nvfp4-pack-quantized";
  });
  EXPECT_EQ(e2, f2 + "config_groups.group_0.format': unsupported compressed-tensors format 'nvfp4-pack-quantized' "
                     "(supported: mxfp4-pack-quantized, float-quantized)");
  auto [f3, e3] = with("k3_ct_strategy", [](Json& q) { q["config_groups"]["group_0"]["weights"]["strategy"] = "tensor"; });
  EXPECT_EQ(e3, f3 + "config_groups.group_0.weights.strategy': unsupported weights.strategy 'tensor' for mxfp4-pack-quantized "
                     "(expected 'group')");
  auto [f4, e4] = with("k3_ct_group", [](Json& q) { q["config_groups"]["group_0"]["weights"]["group_size"] = 16; });
  EXPECT_EQ(e4, f4 + "config_groups.group_0.weights.group_size': mxfp4-pack-quantized needs weights.group_size 32, got 16");
  auto [f5, e5] = with("k3_ct_regex", [](Json& q) { q["ignore"][1] = "re:(shared"; });
  EXPECT_EQ(e5.rfind(f5 + "ignore[1]': invalid regular expression 're:(shared': ", 0), 0u) << e5;
  auto [f6, e6] = with("k3_ct_status", [](Json& q) { q["quantization_status"] = "frozen"; });
  EXPECT_EQ(e6, f6 + "quantization_status': unsupported quantization_status 'frozen' (expected 'compressed')");
  // A group format that contradicts the top-level one is refused; "mixed-precision" allows any.
  auto [f7, e7] = with("k3_ct_contradiction", [](Json& q) { q["format"] = "float-quantized"; });
  EXPECT_EQ(e7, f7 + "config_groups.group_0.format': config group format 'mxfp4-pack-quantized' contradicts the "
                     "top-level format 'float-quantized' (only a 'mixed-precision' top-level format allows per-group "
                     "formats)");
  auto [f8, e8] = with("k3_ct_mixed", [](Json& q) { q["format"] = "mixed-precision"; });
  EXPECT_EQ(e8, "no error");
}

}  // namespace
}  // namespace k3
