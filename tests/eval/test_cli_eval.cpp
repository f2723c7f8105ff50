// `k3 eval` end to end on make-tiny models: the JSON report, KL of a model against itself (0) and
// against another family of the same master (> 0), the table, and one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tiny_models.h"

namespace k3 {
namespace {

const std::string kFast = " --threads 2 --max-context 1024";

nlohmann::json run_json(const std::string& args) {
  const test::CliResult r = test::run_k3("eval " + args + kFast + " --json");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  return nlohmann::json::parse(r.out);
}

TEST(CliEval, JsonReport) {
  const std::string model = test::tiny_model("kimi-k3", "bf16");
  const nlohmann::json j = run_json("--model " + model + " --n 1 --seed 5");
  EXPECT_EQ(j["model"], model);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["seed"], 5);
  ASSERT_EQ(j["tasks"].size(), 4u);
  for (const char* t : {"add", "sort", "copy", "recall"}) {
    const nlohmann::json& s = j["tasks"][t];
    EXPECT_EQ(s["n"], 1) << t;
    EXPECT_GE(s["accuracy"].get<double>(), 0.0);
    EXPECT_LE(s["accuracy"].get<double>(), 1.0);
  }
  EXPECT_EQ(j["total"]["n"], 4);
  EXPECT_GT(j["throughput"]["generated_tokens"].get<int64_t>(), 0);
  EXPECT_TRUE(j["kl"].is_null());
}

TEST(CliEval, KlAgainstItselfIsZero) {
  const std::string model = test::tiny_model("kimi-k3", "bf16");
  const nlohmann::json j = run_json("--model " + model + " --kl-base " + model + " --task add,copy --n 1");
  const nlohmann::json& kl = j["kl"];
  EXPECT_EQ(kl["base"], model);
  EXPECT_GT(kl["positions"].get<int64_t>(), 0);
  EXPECT_EQ(kl["mean"].get<double>(), 0.0);
  EXPECT_EQ(kl["max"].get<double>(), 0.0);
  EXPECT_EQ(kl["top1_agreement"].get<double>(), 1.0);
  EXPECT_EQ(kl["base_total"], j["total"]);  // the same model: the same replies
}

TEST(CliEval, KlAgainstAnotherFamilyIsPositive) {
  const std::string base = test::tiny_model("kimi-k3", "bf16");
  const std::string model = test::tiny_model("kimi-k3", "gguf");
  const nlohmann::json j = run_json("--model " + model + " --kl-base " + base + " --task add --n 1");
  const nlohmann::json& kl = j["kl"];
  const double mean = kl["mean"].get<double>(), p99 = kl["p99"].get<double>(), max = kl["max"].get<double>();
  EXPECT_GT(mean, 0.0);
  EXPECT_TRUE(std::isfinite(max));
  EXPECT_LE(mean, max);
  EXPECT_LE(p99, max);
  EXPECT_GE(kl["top1_agreement"].get<double>(), 0.0);
  EXPECT_LE(kl["top1_agreement"].get<double>(), 1.0);
}

TEST(CliEval, TableAndKimiLinear) {
  const std::string model = test::tiny_model("kimi-linear", "bf16");
  const test::CliResult r = test::run_k3("eval --model " + model + " --task recall --n 1" + kFast);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("recall "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("total "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("throughput: 1 examples"), std::string::npos) << r.out;
}

TEST(CliEval, OneLineErrors) {
  const std::string k3 = test::tiny_model("kimi-k3", "bf16");
  const std::string linear = test::tiny_model("kimi-linear", "bf16");
  struct Case {
    std::string args;
    int code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"--model " + k3 + " --task bogus", 2, "'bogus' is not a task"},
      {"--model " + k3 + " --n 0", 2, "--n"},
      {"--model " + k3 + " --n -3", 2, "--n"},
      {"--model " + k3 + " --n 100001", 2, "out of range"},
      {"--model " + k3 + " --seed -1", 2, "--seed"},
      {"--n 1", 2, "--model"},
      {"--model " + k3 + "_missing --n 1", 1, "_missing"},
      {"--model " + k3 + " --kl-base " + k3 + "_missing --n 1", 1, "_missing"},
      {"--model " + k3 + " --kl-base " + linear + " --n 1", 1, "model_type"},
  };
  for (const Case& c : cases) {
    const test::CliResult r = test::run_k3("eval " + c.args);
    EXPECT_EQ(r.code, c.code) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args;
  }
}

}  // namespace
}  // namespace k3
