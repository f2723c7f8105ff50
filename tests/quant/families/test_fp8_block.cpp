// Block-FP8 family, both spellings (DeepSeek `weight_scale_inv`, compressed-tensors
// float-quantized `weight_scale`): make-tiny → plan → exact dequant, load transforms, and every
// problem with its exact text.
#include "quant/families/fp8_block.h"

#include "quant/families/compressed_tensors.h"
#include "quant/formats/fp8/fp8.h"
#include "quantized_test_util.h"

namespace k3 {
namespace {

using test::make_tiny;
using test::plan_headers_only;
using test::problems_text;
using test::rewrite_checkpoint;
using test::Tensors;

// The compressed-tensors spelling, written like make_tiny() writes a family.
test::TinyCheckpoint make_tiny_ct_fp8(TinyArch arch) {
  const std::string dir = ::testing::TempDir() + "/k3_tiny_ct_fp8_" + (arch == TinyArch::KimiK3 ? "k3" : "linear");
  std::filesystem::remove_all(dir);
  Json doc = tiny_config_json(arch, TinySize::Tiny);
  const K3Config config = parse_k3_config(parse_json(doc.dump(), dir + "/config.json"));
  MasterWeights master = make_master(config, 7);
  write_fp8_block_checkpoint(Fp8BlockStyle::CompressedTensors, master, doc, dir);
  return {dir, doc, std::move(master)};
}

// The producer's block FP8 of the master through the reference dequant (BF16-rounded where the
// engine dequantizes at load).
std::optional<std::vector<float>> fp8_expected(const MasterWeights& master, const ParamSpec& spec, const Binding& b) {
  if (!fp8_block_producer_quantizes(spec)) return std::nullopt;
  EXPECT_EQ(b.scheme.name(), "FP8_BLOCK128x128") << spec.name;
  const bool to_bf16 = fp8_block_dequantized_to_bf16_at_load(spec.name);
  EXPECT_EQ(b.transforms, to_bf16 ? std::vector<Transform>{Transform::DequantToBf16} : std::vector<Transform>{}) << spec.name;
  const bool bank = spec.kind == ParamKind::ExpertBank;
  const uint64_t count = bank ? spec.shape[0] : 1, n = spec.shape[bank ? 1 : 0], k = spec.shape[bank ? 2 : 1];
  const std::vector<float>& m = master.at(spec.name);
  std::vector<float> out(m.size());
  std::vector<uint8_t> q(n * k);
  std::vector<float> scale(((n + 127) / 128) * ((k + 127) / 128));
  for (uint64_t e = 0; e < count; ++e) {
    quantize_fp8_block(m.data() + e * n * k, n, k, 128, 128, q.data(), scale.data());
    dequant_fp8_block(q.data(), scale.data(), n, k, 128, 128, out.data() + e * n * k);
  }
  if (to_bf16) {
    for (float& v : out) v = decode_bf16(encode_bf16(v));
  }
  return out;
}

void expect_exact(const test::TinyCheckpoint& t) {
  const LoadPlan plan = plan_headers_only(t.dir);
  ASSERT_TRUE(plan.ok()) << problems_text(plan);
  EXPECT_EQ(plan.family, "fp8-block");
  EXPECT_TRUE(plan.caps.quantized_latent_projections);
  EXPECT_FALSE(plan.caps.split_gguf_kv_b);
  test::expect_every_parameter(
      plan, t.master, [&](const ParamSpec& s, const Binding& b) { return fp8_expected(t.master, s, b); }, 0.05);
  // The tiny projections are FP8 in the file and BF16 after load; q_proj stays FP8.
  const auto& f_a = plan.bindings.at(plan.index_of("model.layers.0.self_attn.f_a_proj.weight"));
  EXPECT_EQ(f_a.transforms, std::vector<Transform>{Transform::DequantToBf16});
  EXPECT_TRUE(plan.bindings.at(plan.index_of("model.layers.0.self_attn.q_proj.weight")).transforms.empty());
}

TEST(Fp8BlockFamily, DeepSeekStyleEveryParameterIsTheBlockQuantizationOfTheMaster) {
  for (TinyArch arch : {TinyArch::KimiK3, TinyArch::KimiLinear}) {
    auto t = make_tiny(FamilyId::Fp8Block, arch);
    const Json config = test::read_config(t.dir);
    const Json& q = arch == TinyArch::KimiK3 ? config["text_config"]["quantization_config"] : config["quantization_config"];
    EXPECT_EQ(q, Json::parse(R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                 "weight_block_size": [128, 128]})"));
    expect_exact(t);
  }
}

TEST(Fp8BlockFamily, CompressedTensorsStyleEveryParameterIsTheBlockQuantizationOfTheMaster) {
  for (TinyArch arch : {TinyArch::KimiK3, TinyArch::KimiLinear}) {
    auto t = make_tiny_ct_fp8(arch);
    EXPECT_EQ(open_checkpoint_dir(t.dir).family, FamilyId::Fp8Block);
    expect_exact(t);
  }
}

// Kimi-Linear names: no language_model. prefix.
TEST(Fp8BlockFamily, DeepSeekStyleProblemsAreReportedWithTheirExactText) {
  auto t = make_tiny(FamilyId::Fp8Block, TinyArch::KimiLinear);
  const std::string L = "model.layers.";
  const std::string dir = rewrite_checkpoint(
      t.dir, "k3_fp8_problems",
      [&](Tensors& ts) {
        test::drop_tensor(ts, L + "1.self_attn.q_proj.weight_scale_inv");
        auto& shape = test::tensor_named(ts, L + "2.self_attn.k_proj.weight_scale_inv");
        shape.shape = {1, 2};
        shape.bytes.resize(8);
        auto& dense = test::tensor_named(ts, L + "2.self_attn.v_proj.weight");
        dense.dtype = Dtype::BF16;
        dense.bytes.resize(dense.bytes.size() * 2);
        test::tensor_named(ts, L + "4.self_attn.o_proj.weight_scale_inv").dtype = Dtype::I32;
        ts.push_back({L + "0.self_attn.q_proj.input_scale", Dtype::F32, {}, std::vector<uint8_t>(4)});
      },
      [](Json& c) { c["quantization_config"]["ignored_layers"] = Json::array({"model.layers.3.self_attn.o_proj"}); });
  const LoadPlan plan = plan_headers_only(dir);
  const std::string f = dir + "/model.safetensors: ";
  const std::vector<std::string> want = {
      f + "parameter 'model.layers.1.self_attn.q_proj.weight': missing tensor 'model.layers.1.self_attn.q_proj.weight_scale_inv'",
      f + "tensor 'model.layers.2.self_attn.k_proj.weight_scale_inv': field 'shape': shape [1, 2] does not match the "
          "FP8_BLOCK128x128 weight_scale_inv of parameter 'model.layers.2.self_attn.k_proj.weight' (expected [1, 1])",
      f + "tensor 'model.layers.2.self_attn.v_proj.weight': field 'dtype': dtype BF16 does not match the FP8_BLOCK128x128 "
          "weight of parameter 'model.layers.2.self_attn.v_proj.weight' (expected F8_E4M3)",
      f + "tensor 'model.layers.3.self_attn.o_proj.weight': module 'model.layers.3.self_attn.o_proj' is stored quantized, "
          "but the quantization config keeps it unquantized (ignored_layers entry 'model.layers.3.self_attn.o_proj')",
      f + "tensor 'model.layers.4.self_attn.o_proj.weight_scale_inv': field 'dtype': dtype I32 does not match the "
          "FP8_BLOCK128x128 weight_scale_inv of parameter 'model.layers.4.self_attn.o_proj.weight' (expected F32, BF16 or F16)",
      f + "tensor 'model.layers.0.self_attn.q_proj.input_scale': tensor binds to no parameter (unknown or renamed module)",
  };
  ASSERT_EQ(plan.problems.size(), want.size()) << problems_text(plan);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(plan.problems[i].text(), want[i]);
}

TEST(Fp8BlockFamily, CompressedTensorsStyleMissingScaleNamesWeightScale) {
  auto t = make_tiny_ct_fp8(TinyArch::KimiK3);
  const std::string dir = rewrite_checkpoint(t.dir, "k3_ct_fp8_missing", [](Tensors& ts) {
    test::drop_tensor(ts, "language_model.model.layers.3.self_attn.kv_b_proj.weight_scale");
  });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 1u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(), dir + "/model.safetensors: parameter 'model.layers.3.self_attn.kv_b_proj.weight': "
                                           "missing tensor 'model.layers.3.self_attn.kv_b_proj.weight_scale'");
}

std::string plan_error(const std::string& dir) {
  try {
    plan_checkpoint(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Fp8BlockFamily, UnservableConfigsFailAtTheirKey) {
  auto ds = make_tiny(FamilyId::Fp8Block, TinyArch::KimiLinear);
  const auto ds_error = [&](const std::string& name, const std::function<void(Json&)>& edit) {
    const std::string dir = rewrite_checkpoint(ds.dir, name, {}, [&](Json& c) { edit(c["quantization_config"]); });
    return std::pair{dir + "/config.json: field 'quantization_config.", plan_error(dir)};
  };
  auto [f1, e1] = ds_error("k3_fp8_static", [](Json& q) { q["activation_scheme"] = "static"; });
  EXPECT_EQ(e1, f1 + "activation_scheme': unsupported activation_scheme 'static' (block FP8 quantizes activations dynamically)");
  auto [f2, e2] = ds_error("k3_fp8_fmt", [](Json& q) { q["fmt"] = "e5m2"; });
  EXPECT_EQ(e2, f2 + "fmt': unsupported fmt 'e5m2' (expected 'e4m3')");
  auto [f3, e3] = ds_error("k3_fp8_tensor", [](Json& q) { q.erase("weight_block_size"); });
  EXPECT_EQ(e3, f3 + "weight_block_size': missing weight_block_size (per-tensor fp8 is not a block format)");

  auto ct = make_tiny_ct_fp8(TinyArch::KimiK3);
  const std::string dir = rewrite_checkpoint(ct.dir, "k3_ct_fp8_channel", {}, [](Json& c) {
    c["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "channel";
  });
  EXPECT_EQ(plan_error(dir), dir + "/config.json: field 'text_config.quantization_config.config_groups.group_0.weights.strategy': "
                                   "unsupported weights.strategy 'channel' for float-quantized (supported: 'block')");
}

}  // namespace
}  // namespace k3
