// Non-finite logits are an error of the Engine step, so every command that prints or samples them
// (`k3 logits`, `k3 generate`, `k3 chat`) fails with one line and exit 1 instead of writing NaNs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "error_of.h"
#include "runtime/engine.h"
#include "tools/cli_runner.h"

namespace k3 {
namespace {

TEST(FiniteLogits, FirstNonFiniteValueIsNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits(12, 0.5f);
  EXPECT_NO_THROW(require_finite_logits(logits, 4, 0, "m"));
  logits[7] = nan;
  logits[9] = inf;
  EXPECT_EQ(test::error_of([&] { require_finite_logits(logits, 4, 10, "m"); }),
            "m: model produced non-finite logits at position 11 (first NaN at vocab id 3): check the weights and "
            "config values such as rms_norm_eps, routed_scaling_factor and activation_situ_beta");
  logits[7] = -inf;
  EXPECT_NE(test::error_of([&] { require_finite_logits(logits, 4, 0, "m"); }).find("position 1 (first -inf at vocab id 3)"),
            std::string::npos);
}

// Overwrites every element of the BF16 tensor whose name ends in `suffix` (in any shard of `dir`)
// with a quiet NaN.
void poison_bf16_tensor(const std::string& dir, const std::string& suffix) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".safetensors" || entry.path().filename() == "master.safetensors") continue;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header_len = 0;
    f.read(reinterpret_cast<char*>(&header_len), 8);
    std::string header(header_len, '\0');
    f.read(header.data(), static_cast<std::streamsize>(header_len));
    const nlohmann::json h = nlohmann::json::parse(header);
    for (const auto& [name, info] : h.items()) {
      if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      ASSERT_EQ(info["dtype"], "BF16");
      const uint64_t begin = info["data_offsets"][0], end = info["data_offsets"][1];
      std::string nans;
      for (uint64_t i = begin; i < end; i += 2) nans += std::string("\xC0\x7F", 2);
      f.seekp(static_cast<std::streamoff>(8 + header_len + begin));
      f.write(nans.data(), static_cast<std::streamsize>(nans.size()));
      return;
    }
  }
  FAIL() << "no tensor ending in " << suffix << " in " << dir;
}

void expect_nonfinite_error(const test::CliResult& r, const std::string& command, const std::string& dir,
                            const std::string& position) {
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("k3 " + command + ": error: " + dir + ": model produced non-finite logits at position " + position +
                            " (first NaN at vocab id 0)",
                        0),
            0u)
      << r.err;
}

TEST(FiniteLogits, CommandsRefuseNanWeights) {
  const std::string dir = ::testing::TempDir() + "/k3_nan_weights";
  std::filesystem::remove_all(dir);
  ASSERT_EQ(test::run_k3("make-tiny --family bf16 --out " + dir).code, 0);
  poison_bf16_tensor(dir, "model.norm.weight");

  const std::string out = dir + "/logits.npy";
  expect_nonfinite_error(test::run_k3("logits --model " + dir + " --ids 1,2,3 --threads 1 --out " + out), "logits", dir, "0");
  EXPECT_FALSE(std::filesystem::exists(out));
  const test::CliResult gen = test::run_k3("generate --model " + dir + " --ids 1,2,3 --max-tokens 2 --threads 1");
  expect_nonfinite_error(gen, "generate", dir, "2");
  EXPECT_EQ(gen.out, "");
  const std::string messages = dir + "/messages.json";
  std::ofstream(messages) << R"({"messages": [{"role": "user", "content": "Hi"}]})";
  const test::CliResult chat = test::run_k3("chat --model " + dir + " --messages " + messages + " --max-tokens 2 --threads 1");
  EXPECT_EQ(chat.code, 1) << chat.err;
  EXPECT_NE(chat.err.find(dir + ": model produced non-finite logits at position "), std::string::npos) << chat.err;
}

}  // namespace
}  // namespace k3
