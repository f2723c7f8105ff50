// Hostile integers and formats in the quantization configs of real family checkpoints: every one
// is refused by `k3 check` (and `k3 logits`) with one error line naming the file and the field,
// exit 1 and no signal. Sizes beyond 32 bits used to be truncated (2^32 + 128 acted as 128) or to
// divide by zero.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "family_test_util.h"
#include "tools/cli_runner.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

// A copy of `src` as TempDir()/name with the JSON file `file` edited.
std::string edited_copy(const std::string& src, const std::string& name, const std::string& file,
                        const std::function<void(Json&)>& edit) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  fs::remove_all(dir);
  fs::copy(src, dir, fs::copy_options::recursive);
  Json doc;
  {
    std::ifstream in(dir + "/" + file);
    doc = Json::parse(in);
  }
  edit(doc);
  std::ofstream(dir + "/" + file) << doc.dump(2);
  return dir;
}

// `k3 CMD DIR-args` fails with exit 1 and exactly one stderr line that contains `message`.
void expect_one_line_error(const std::string& args, const std::string& message) {
  const test::CliResult r = test::run_k3(args);
  EXPECT_EQ(r.code, 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(HostileConfig, Fp8BlockSizesBeyond32BitsAreRefused) {
  const auto t = test::make_tiny(FamilyId::Fp8Block, TinyArch::KimiK3);
  struct Case {
    const char* name;
    int64_t rows;
  } cases[] = {{"fp8_2pow32", int64_t{1} << 32}, {"fp8_2pow32_128", (int64_t{1} << 32) + 128}};
  for (const Case& c : cases) {
    const std::string dir = edited_copy(t.dir, c.name, "config.json", [&](Json& j) {
      j["text_config"]["quantization_config"]["weight_block_size"] = {c.rows, 128};
    });
    const std::string want = dir + "/config.json: field 'text_config.quantization_config.weight_block_size[0]': " +
                             std::to_string(c.rows) + " is out of range [1, 65536]";
    expect_one_line_error("check " + dir, want);
    expect_one_line_error("logits --model " + dir + " --ids 1,2 --threads 1 --out " + dir + "/l.npy", want);
    EXPECT_FALSE(fs::exists(dir + "/l.npy"));
  }
}

TEST(HostileConfig, ModelSlimGroupSizeBeyond32BitsIsRefused) {
  const auto t = test::make_tiny(FamilyId::ModelSlimW4A8, TinyArch::KimiK3);
  for (int64_t size : {(int64_t{1} << 32) + 64, int64_t{1} << 32}) {
    const std::string dir = edited_copy(t.dir, "slim_" + std::to_string(size), "quant_model_description.json",
                                        [&](Json& j) { j["group_size"] = size; });
    expect_one_line_error("check " + dir, dir + "/quant_model_description.json: field 'group_size': " +
                                              std::to_string(size) + " is out of range [0, 65536]");
  }
}

TEST(HostileConfig, ModelOptGroupSizeBeyond32BitsIsRefused) {
  const auto t = test::make_tiny(FamilyId::ModelOptNvfp4, TinyArch::KimiK3);
  const std::string dir = edited_copy(t.dir, "modelopt_group", "config.json", [](Json& j) {
    j["quantization_config"]["group_size"] = (int64_t{1} << 32) + 16;
  });
  expect_one_line_error("check " + dir, dir + "/config.json: field 'quantization_config.group_size': 4294967312 is out "
                                              "of range [1, 65536]");
}

TEST(HostileConfig, ModelDimensionBeyond32BitsIsRefused) {
  const auto t = test::make_tiny(FamilyId::Bf16, TinyArch::KimiK3);
  const std::string dir = edited_copy(t.dir, "bf16_dim", "config.json",
                                      [](Json& j) { j["text_config"]["moe_intermediate_size"] = (int64_t{1} << 32) + 32; });
  expect_one_line_error("check " + dir, dir + "/config.json: field 'text_config.moe_intermediate_size': 4294967328 is "
                                              "out of range [1, 16777216]");
}

TEST(HostileConfig, CompressedTensorsFormatContradictingItsGroupIsRefused) {
  const auto t = test::make_tiny(FamilyId::CompressedTensorsMxfp4, TinyArch::KimiK3);
  const std::string dir = edited_copy(t.dir, "ct_format", "config.json",
                                      [](Json& j) { j["text_config"]["quantization_config"]["format"] = "float-quantized"; });
  expect_one_line_error("check " + dir,
                        dir + "/config.json: field 'text_config.quantization_config.config_groups.group_0.format': config "
                              "group format 'mxfp4-pack-quantized' contradicts the top-level format 'float-quantized'");
}

}  // namespace
}  // namespace k3
