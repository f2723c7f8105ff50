// k3 quantize --calib: the float model's activation ranges measured at each linear's input, and the
// ModelOpt families' static input_scale set from them (amax / (6·448) for NVFP4, amax / 448 for FP8,
// per expert for the routed experts, ModelOpt's fallback for experts no token reached).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/safetensors.h"
#include "quant/families/checkpoint_writer.h"
#include "quant/families/family_test_util.h"
#include "quant/families/family_writer.h"
#include "quant/families/modelopt.h"
#include "runtime/calibration.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

const std::vector<std::vector<int64_t>> kSequences = {{1, 2, 3, 4, 5, 6, 7, 8}, {300, 17, 42, 99, 5, 250, 3, 64, 2, 31, 400, 9}};

// The input_scale scalars of a checkpoint, by stored module name.
std::map<std::string, float> input_scales(const std::string& dir) {
  const SafetensorsCheckpoint ckpt = SafetensorsCheckpoint::open(dir);
  std::map<std::string, float> out;
  for (const auto& e : ckpt.entries()) {
    const std::string& name = ckpt.info(e).name;
    if (name.size() < 12 || name.compare(name.size() - 12, 12, ".input_scale") != 0) continue;
    float v;
    std::memcpy(&v, ckpt.data(e).data(), 4);
    out[name.substr(0, name.size() - 12)] = v;
  }
  return out;
}

TEST(Calibration, InputAmaxFallsBackLikeModelOpt) {
  const ParamSpec bank{"model.layers.1.mlp.experts.w1.weight", {4, 8, 8}, ParamKind::ExpertBank, ParamGroup::Experts, 1};
  const ParamSpec linear{"model.layers.0.self_attn.q_proj.weight", {8, 8}, ParamKind::Linear, ParamGroup::Kda, 0};
  InputAmax a;
  a.by_param[bank.name] = {0.0f, 3.0f, 0.0f, 5.0f};
  EXPECT_EQ(a.of(bank, 1), 3.0f);
  EXPECT_EQ(a.of(bank, 0), 5.0f);  // no token routed: the largest calibrated expert of the bank
  EXPECT_EQ(a.of(bank, 3), 5.0f);
  EXPECT_FALSE(a.of(linear, -1));  // never reached: the recipe constant
  a.by_param[linear.name] = {0.0f};
  EXPECT_FALSE(a.of(linear, -1));
  a.by_param[linear.name] = {2.5f};
  EXPECT_EQ(a.of(linear, -1), 2.5f);
  a.by_param[bank.name] = {0.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_FALSE(a.of(bank, 2));
}

// The measured amax of layer 0's q_proj input is max |rms_norm(embedding) ⊙ input_layernorm| over the
// calibration tokens (Kimi-Linear: the first layer reads the embedding), and every ModelOpt family's
// input_scale follows from the measurement.
TEST(Calibration, InputScalesFollowTheMeasuredAmax) {
  const auto t = test::make_tiny(FamilyId::Bf16, TinyArch::KimiLinear);
  const InputAmax amax = calibrate_input_amax(t.dir, kSequences, 2);
  const CheckpointSource source(t.dir);
  const K3Config& c = source.config();

  const std::vector<float> embed = source.read(source.spec("model.embed_tokens.weight"));
  const std::vector<float> norm = source.read(source.spec("model.layers.0.input_layernorm.weight"));
  const int64_t h = c.hidden_size;
  float want = 0.0f;
  for (const auto& seq : kSequences) {
    for (int64_t id : seq) {
      const float* x = embed.data() + id * h;
      double ss = 0;
      for (int64_t i = 0; i < h; ++i) ss += static_cast<double>(x[i]) * x[i];
      const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + c.rms_norm_eps));
      for (int64_t i = 0; i < h; ++i) want = std::max(want, std::fabs(x[i] * r * norm[i]));
    }
  }
  const ParamSpec& q = source.spec("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(amax.of(q, -1));
  EXPECT_FLOAT_EQ(*amax.of(q, -1), want);

  for (FamilyId family : {FamilyId::ModelOptNvfp4, FamilyId::ModelOptFp8, FamilyId::ModelOptMixed}) {
    SCOPED_TRACE(family_name(family));
    const std::string out = ::testing::TempDir() + "/k3_calib_" + family_name(family);
    fs::remove_all(out);
    QuantizeOptions options;
    options.input_amax = &amax;
    write_family(family, source, t.config_doc, out, options);
    EXPECT_TRUE(test::plan_headers_only(out).ok());
    const std::map<std::string, float> scales = input_scales(out);
    const float divisor = family == FamilyId::ModelOptFp8 ? 448.0f : 6.0f * 448.0f;
    size_t checked = 0;
    for (const ParamSpec& spec : source.params()) {
      const bool bank = spec.kind == ParamKind::ExpertBank;
      for (int64_t u = 0; u < (bank ? static_cast<int64_t>(spec.shape[0]) : 1); ++u) {
        const int64_t expert = bank ? u : -1;
        const std::string module = unit_label(spec, expert);
        const auto it = scales.find(stored_tensor_name(c, module));
        if (it == scales.end()) continue;
        const std::optional<float> a = amax.of(spec, expert);
        ASSERT_TRUE(a) << module << " was never reached by the calibration tokens";
        EXPECT_EQ(it->second, *a / divisor) << module;
        ++checked;
      }
    }
    EXPECT_GT(checked, 10u);
    if (family == FamilyId::ModelOptNvfp4) {
      EXPECT_EQ(scales.at(stored_tensor_name(c, "model.layers.0.self_attn.q_proj")), want / divisor);
    }
    // w1 and w3 of an expert read one input: one input_scale.
    const std::string e0 = stored_tensor_name(c, "model.layers.1.mlp.experts.0.");
    EXPECT_EQ(scales.at(e0 + "w1"), scales.at(e0 + "w3"));
    EXPECT_NE(scales.at(e0 + "w1"), scales.at(e0 + "w2"));
  }
}

TEST(Calibration, CalibrationFileErrorsNameTheEntry) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  EXPECT_EQ(load_calibration_ids(write("ok.json", "[[1, 2], [3]]"), 512), (std::vector<std::vector<int64_t>>{{1, 2}, {3}}));
  const std::pair<std::string, std::string> cases[] = {
      {"[[1, 2], [3, 512]]", "field '[1][1]': 512 is out of range [0, 511]"},
      {"[[1, -1]]", "field '[0][1]': -1 is out of range [0, 511]"},
      {"[[1], []]", "field '[1]': is an empty sequence"},
      {"[1, 2]", "field '[0]': must be an array of token ids"},
      {"{\"ids\": [1]}", "must be a JSON array of token-id arrays"},
      {"[]", "holds no sequence"},
      {"[[1, 2.5]]", "field '[0][1]'"},
  };
  for (const auto& [text, message] : cases) {
    const std::string path = write("bad.json", text);
    try {
      load_calibration_ids(path, 512);
      FAIL() << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(path, 0), 0u) << e.what();
    }
  }
  EXPECT_THROW(load_calibration_ids(dir + "/missing.json", 512), Error);
}

}  // namespace
}  // namespace k3
