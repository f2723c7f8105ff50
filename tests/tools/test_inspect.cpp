// `k3 inspect` against the ggml-made GGUF fixture: every metadata key with its value and type,
// every tensor's type/shape/bytes/offset, and every tensor dequantized bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/npy.h"
#include "io/safetensors.h"
#include "tools/cli_runner.h"

namespace {

using k3::test::run_k3;
using nlohmann::json;

std::string fixture(const std::string& name) { return k3::test::shared_dir() + "/fixtures/gguf-peer/" + name; }

json manifest() {
  const std::string text = k3::test::slurp(fixture("manifest.json"));
  if (text.empty()) throw std::runtime_error("fixture missing: " + fixture("manifest.json"));
  return json::parse(text);
}

TEST(Inspect, GgufJsonShowsEveryMetadataKeyWithValueAndType) {
  const json m = manifest();
  auto r = run_k3("inspect " + fixture("quants.gguf") + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["version"], m["gguf_version"]);
  EXPECT_EQ(doc["alignment"], m["alignment"]);
  ASSERT_EQ(doc["metadata"].size(), m["metadata"].size());
  for (const auto& kv : m["metadata"]) {
    const std::string key = kv["key"];
    ASSERT_TRUE(doc["metadata"].contains(key)) << key;
    const json& got = doc["metadata"][key];
    std::string type = kv["type"];
    if (type == "arr") type = "arr[" + kv["array_type"].get<std::string>() + "]";
    EXPECT_EQ(doc["metadata_types"][key], type) << key;
    if (kv.contains("value_str")) {  // 64-bit integers: exact
      EXPECT_EQ(got.dump(), kv["value_str"].get<std::string>()) << key;
    } else if (kv["type"] == "f32" || (kv["type"] == "arr" && kv["array_type"] == "f32")) {
      const json want = kv["value"];
      if (want.is_array()) {
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].get<float>(), want[i].get<float>()) << key;
      } else {
        EXPECT_EQ(got.get<float>(), want.get<float>()) << key;
      }
    } else {
      EXPECT_EQ(got, kv["value"]) << key;
    }
  }
}

TEST(Inspect, GgufJsonListsEveryTensor) {
  const json m = manifest();
  auto r = run_k3("inspect " + fixture("quants.gguf") + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["tensors"].size(), m["tensors"].size());
  for (size_t i = 0; i < m["tensors"].size(); ++i) {
    const json& want = m["tensors"][i];
    const json& got = doc["tensors"][i];
    EXPECT_EQ(got["name"], want["name"]);
    EXPECT_EQ(got["type"], want["ggml_type"]);
    EXPECT_EQ(got["shape"], want["numpy_shape"]);
    EXPECT_EQ(got["bytes"], want["nbytes"]);
    EXPECT_EQ(got["offset"], want["absolute_offset"]);
  }
}

TEST(Inspect, GgufDequantReproducesEveryNpyBitForBit) {
  const json m = manifest();
  const std::string out = ::testing::TempDir() + "/inspect_dequant.npy";
  for (const auto& t : m["tensors"]) {
    const std::string name = t["name"];
    auto r = run_k3("inspect " + fixture("quants.gguf") + " --tensor " + name + " --dequant --out " + out);
    ASSERT_EQ(r.code, 0) << name << ": " << r.err;
    const k3::NpyArray got = k3::read_npy(out);
    const k3::NpyArray want = k3::read_npy(fixture(t["dequant_npy"].get<std::string>()));
    EXPECT_EQ(got.dtype, "<f4") << name;
    EXPECT_EQ(got.shape, want.shape) << name;
    ASSERT_EQ(got.data.size(), want.data.size()) << name;
    EXPECT_EQ(std::memcmp(got.data.data(), want.data.data(), got.data.size()), 0) << name;
  }
}

TEST(Inspect, SafetensorsDirectoryJsonAndDequant) {
  const std::string ckpt = k3::test::shared_dir() + "/fixtures/kimi-linear-peer/ckpt";
  auto r = run_k3("inspect " + ckpt + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["format"], "safetensors");
  EXPECT_EQ(doc["metadata"]["format"], "pt");
  EXPECT_EQ(doc["tensors"].size(), 211u);
  const std::string out = ::testing::TempDir() + "/inspect_st.npy";
  r = run_k3("inspect " + ckpt + " --tensor model.norm.weight --dequant --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto file = k3::SafetensorsCheckpoint::open(ckpt);
  const auto& e = file.at("model.norm.weight");
  const auto bytes = file.data(e);
  const k3::NpyArray got = k3::read_npy(out);
  EXPECT_EQ(got.shape, std::vector<uint64_t>{96});
  ASSERT_EQ(got.data.size(), bytes.size());
  EXPECT_EQ(std::memcmp(got.data.data(), bytes.data(), bytes.size()), 0);
}

TEST(Inspect, ErrorsAreOneLineWithExitCodes) {
  auto r = run_k3("inspect /nonexistent/path.safetensors");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "k3 inspect: error: /nonexistent/path.safetensors: no such file or directory\n");

  r = run_k3("inspect " + fixture("quants.gguf") + " --tensor nope --dequant --out /tmp/x.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "k3 inspect: error: " + fixture("quants.gguf") + ": tensor 'nope': no such tensor\n");

  r = run_k3("inspect " + fixture("quants.gguf") + " --dequant");
  EXPECT_EQ(r.code, 2);
  r = run_k3("inspect --bogus-flag x");
  EXPECT_EQ(r.code, 2);
  r = run_k3("");
  EXPECT_EQ(r.code, 2);

  // A file that is not GGUF though named so: one line, exit 1.
  const std::string bad = ::testing::TempDir() + "/bad.gguf";
  { std::ofstream(bad) << "not a gguf file at all"; }
  r = run_k3("inspect " + bad);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
}

}  // namespace
