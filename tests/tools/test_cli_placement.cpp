// `k3 check DIR --devices …` (parallel/placement.h) on the real Kimi-K3 config: config-only
// directories (the release's config.json; the NVFP4 ModelOpt variant from `k3 make-headers
// --no-tensors`), the plans, the refusal, the JSON shape, and the flags' usage errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_runner.h"
#include "io/json.h"

namespace k3 {
namespace {

using test::run_k3;

const std::string kK3Config = test::shared_dir() + "/fixtures/real-configs/kimi-k3.config.json";

// A directory holding only the release's config.json.
std::string release_config_dir() {
  const std::string dir = ::testing::TempDir() + "/k3_release_config";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kK3Config, dir + "/config.json", std::filesystem::copy_options::overwrite_existing);
  return dir;
}

TEST(CliPlacement, ReleaseOnTwoNodesOfEightH200AsJson) {
  const auto r = run_k3("check " + release_config_dir() + " --devices 8xH200 --nodes 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const Json doc = Json::parse(r.out);
  EXPECT_EQ(doc["family"], "compressed-tensors-mxfp4");
  EXPECT_EQ(doc["ok"], true);
  const Json& p = doc["placement"];
  EXPECT_EQ(p["tensor_parallel"], 8);
  EXPECT_EQ(p["expert_parallel"], 16);
  EXPECT_EQ(p["from_layout"], true);
  EXPECT_EQ(p["machine"]["device"], "H200");
  EXPECT_EQ(p["machine"]["nodes"], 2);
  EXPECT_EQ(p["expert"]["experts"], 896);
  EXPECT_EQ(p["expert"]["layers"], 92);
  EXPECT_EQ(p["state"]["mla_bytes_per_token"], 27648);
  uint64_t groups = 0;
  for (const Json& g : p["groups"]) groups += g["bytes"].get<uint64_t>();
  EXPECT_EQ(groups, p["model_bytes"].get<uint64_t>());
  ASSERT_EQ(p["gpus"].size(), 16u);
  for (const Json& g : p["gpus"]) {
    EXPECT_EQ(g["experts"]["count"], 56);
    EXPECT_EQ(g["experts"]["resident"], 56);
    EXPECT_EQ(g["host_expert_bytes"], 0);
    EXPECT_GT(g["free_bytes"].get<uint64_t>(), 0u);
  }
  EXPECT_EQ(p["gpus"][9]["node"], 1);
  EXPECT_EQ(p["gpus"][9]["rank"], 1);
  EXPECT_EQ(p["gpus"][9]["experts"]["first"], 504);
  EXPECT_EQ(p["streams_experts"], false);
  ASSERT_EQ(p["decode"].size(), 2u);
  EXPECT_EQ(p["decode"][0]["batch"], 1);
  EXPECT_EQ(p["decode"][1]["batch"], 64);
  for (const Json& d : p["decode"]) {
    EXPECT_GT(d["tokens_per_second"].get<double>(), 0);
    EXPECT_GT(d["bytes"]["network"].get<double>(), 0);
    EXPECT_EQ(d["bytes"]["pcie"], 0.0);
    EXPECT_NEAR(d["seconds"]["step"].get<double>(), d["batch"].get<double>() / d["tokens_per_second"].get<double>(), 1e-12);
  }
}

TEST(CliPlacement, ReleaseOnOneNodeNeedsHostMemory) {
  const std::string dir = release_config_dir();
  const auto refused = run_k3("check " + dir + " --devices 8xH200");
  EXPECT_EQ(refused.code, 1);
  EXPECT_EQ(refused.out, "");
  EXPECT_EQ(refused.err,
            "k3 check: error: field '--devices': does not fit: the routed experts take 1446.5 GB and the 8 H200 GPUs have room for "
            "934.8 GB of them beside everything else (511.7 GB short); add --host-memory, --nodes or devices\n");

  const auto host = run_k3("check " + dir + " --devices 8xH200 --host-memory 1.5T --batch 1,64,256 --context 4096");
  ASSERT_EQ(host.code, 0) << host.err;
  EXPECT_NE(host.out.find("machine    8 H200: tensor parallel 8 (the GPUs of a node), expert parallel 8 (all GPUs)\n"), std::string::npos)
      << host.out;
  EXPECT_NE(host.out.find("host memory: 1649.3 GB per node given; routed experts there: node 0 "), std::string::npos) << host.out;
  EXPECT_NE(host.out.find("(pinned; copied over PCIe when picked"), std::string::npos) << host.out;
  EXPECT_NE(host.out.find("  0-7       0 "), std::string::npos) << host.out;
  EXPECT_NE(host.out.find("\n    256 "), std::string::npos) << host.out;
}

TEST(CliPlacement, Nvfp4VariantOnTwoNodes) {
  const std::string dir = ::testing::TempDir() + "/k3_nvfp4_config";
  std::filesystem::remove_all(dir);
  const auto made = run_k3("make-headers --config " + kK3Config + " --family modelopt-mixed --no-tensors --out " + dir);
  ASSERT_EQ(made.code, 0) << made.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/hf_quant_config.json"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
  const auto r = run_k3("check " + dir + " --devices 8xH200 --nodes 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("family     modelopt-mixed\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  0-15      0-1 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 56 (56) "), std::string::npos) << r.out;
}

TEST(CliPlacement, BadFlagsAreUsageErrorsNamingTheFlag) {
  const std::string dir = ::testing::TempDir();
  const std::pair<std::string, std::string> cases[] = {
      {"--devices 8xFOO", "--devices: '8xFOO' names no known device kind (known: H200, H100)"},
      {"--devices 8xH200 --host-memory 1.5Q", "--host-memory: '1.5Q' is not a size (e.g. 8G, 512M, or bytes)"},
      {"--devices 8xH200 --nodes 0", "--nodes"},
      {"--devices 8xH200 --batch 1,0", "--batch: '0' is not a batch size"},
      {"--devices 8xH200 --cpu-experts", "--cpu-experts requires --host-memory"},
      {"--nodes 2", "--nodes requires --devices"},
      {"--devices 8xH200 --cpu-bandwidth -3", "--cpu-bandwidth"},
  };
  for (const auto& [flags, message] : cases) {
    const auto r = run_k3("check " + dir + " " + flags);
    EXPECT_EQ(r.code, 2) << flags;
    EXPECT_NE(r.err.find("k3: usage error: "), std::string::npos) << flags << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << ": " << r.err;
  }
}

}  // namespace
}  // namespace k3
