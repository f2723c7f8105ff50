// `k3 bench --synthetic`: every bad flag is a one-line error naming the flag, found before any device
// is touched: a malformed or out-of-range value is a usage error (exit 2), the rest exit 1. A valid run either benchmarks (on a GPU) or, without a device or without
// the CUDA backend, is a one-line error as well.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/json.h"
#include "model/config.h"
#include "model/known_configs.h"
#include "model/tiny_config.h"
#include "tools/cli_runner.h"

namespace {

using k3::test::CliResult;
using k3::test::run_k3;

void expect_flag_error(const CliResult& r, const std::string& flag) {
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("'" + flag + "'"), std::string::npos) << r.err;
}

// A malformed or out-of-range value: a usage error naming the flag.
void expect_usage_error(const CliResult& r, const std::string& flag) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("k3: usage error: " + flag + ": ", 0), 0u) << r.err;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

const std::string kBench = "bench --synthetic kimi-linear-48b-a3b ";

TEST(KnownConfigs, KimiLinear48bA3bParses) {
  const std::optional<std::string> text = k3::known_config_json("kimi-linear-48b-a3b");
  ASSERT_TRUE(text.has_value());
  const k3::K3Config c = k3::parse_k3_config(k3::parse_json(*text, "kimi-linear-48b-a3b"));
  EXPECT_EQ(c.hidden_size, 2304);
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_EQ(c.num_layers, 27);
  EXPECT_EQ(c.count(k3::MixerKind::kKda), 20);
  EXPECT_EQ(c.count(k3::MixerKind::kMla), 7);
  EXPECT_FALSE(c.is_kda(3));  // layer 4 (1-based) is MLA
  EXPECT_FALSE(c.is_moe(0));
  EXPECT_EQ(c.count(k3::FfnKind::kMoe), 26);
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->num_experts, 256);
  EXPECT_EQ(c.moe->experts_per_token, 8);
  EXPECT_EQ(c.moe->moe_intermediate_size, 1024);
  EXPECT_FALSE(c.mla.q_lora_rank.has_value());
  EXPECT_FALSE(c.kda.gate_lower_bound.has_value());
  EXPECT_FALSE(k3::known_config_json("kimi-linear").has_value());
}

TEST(CliBench, BadBatchListNamesTheFlag) {
  for (const char* list : {"1,x", "0", "1,,8", "8,", "5000", "1.5"}) {
    expect_usage_error(run_k3(kBench + "--batch '" + list + "'"), "--batch");
  }
}

TEST(CliBench, ContextAndStepsMustBePositive) {
  expect_usage_error(run_k3(kBench + "--context 0"), "--context");
  expect_usage_error(run_k3(kBench + "--context=-4"), "--context");
  expect_usage_error(run_k3(kBench + "--steps 0"), "--steps");
}

TEST(CliBench, DeviceMustBeCuda) {
  expect_flag_error(run_k3(kBench + "--device cpu"), "--device");
  expect_usage_error(run_k3(kBench + "--device gpu1"), "--device");
}

TEST(CliBench, UnknownConfigNameOrBadConfigFileNamesTheFlag) {
  expect_flag_error(run_k3("bench --synthetic no-such-model"), "--synthetic");
  expect_flag_error(run_k3("bench --synthetic " + write_file("broken.json", "{ not json")), "--synthetic");
  expect_flag_error(run_k3("bench --synthetic " + write_file("partial.json", R"({"model_type": "kimi_linear"})")),
                    "--synthetic");
}

TEST(CliBench, UnwritableJsonNamesTheFlag) {
  expect_flag_error(run_k3(kBench + "--json /nonexistent-dir/bench.json"), "--json");
}

TEST(CliBench, ExpertsOnCpuLeaveTheGpuAnExpertAndExcludeStreaming) {
  expect_flag_error(run_k3(kBench + "--experts-on-cpu 256"), "--experts-on-cpu");
  expect_usage_error(run_k3(kBench + "--experts-on-cpu=-1"), "--experts-on-cpu");
  expect_flag_error(run_k3(kBench + "--experts-on-cpu 8 --expert-cache 4G"), "--experts-on-cpu");
}

TEST(CliBench, MlaDecodeKernelIsAutoMmaOrWgmma) {
  for (const char* bad : {"", "flash", "WGMMA"}) {
    expect_usage_error(run_k3(kBench + "--mla-decode-kernel '" + bad + "'"), "--mla-decode-kernel");
  }
}

TEST(CliBench, RoutingIsUniformOrZipf) {
  for (const char* bad : {"zipf", "zipf:0", "zipf:9", "skewed"}) expect_usage_error(run_k3(kBench + "--routing " + bad), "--routing");
  // Kimi-Linear small has two expert groups: a skew is fitted for one.
  const std::string grouped =
      write_file("grouped.json", k3::tiny_config_json(k3::TinyArch::KimiLinear, k3::TinySize::Small).dump());
  expect_flag_error(run_k3("bench --synthetic " + grouped + " --routing zipf:1.2"), "--routing");
}

// --family and its flags: checked before the device, and before anything is written.
TEST(CliBench, FamilyFlagsNameTheFlag) {
  expect_usage_error(run_k3(kBench + "--family nvfp5"), "--family");
  expect_flag_error(run_k3(kBench + "--family gguf-expert-pack"), "--family");
  expect_flag_error(run_k3(kBench + "--family modelopt-mixed --recipe q4_k_m"), "--recipe");
  expect_flag_error(run_k3(kBench + "--recipe q4_k_m"), "--recipe");
  expect_usage_error(run_k3(kBench + "--family gguf --recipe q9"), "--recipe");
  expect_flag_error(run_k3(kBench + "--family bf16 --template-experts 257"), "--template-experts");
  expect_usage_error(run_k3(kBench + "--family bf16 --template-experts 0"), "--template-experts");
  expect_flag_error(run_k3(kBench + "--dense-linears bf16"), "--dense-linears");
  expect_flag_error(run_k3(kBench + "--dense-linears packed"), "--dense-linears");
  expect_usage_error(run_k3(kBench + "--family gguf --dense-linears fp16"), "--dense-linears");
}

// A run of the small Kimi-Linear (or `arch`; both have 32 experts, top-4): on a GPU it runs and writes
// its numbers (the JSON document, which `check` inspects); elsewhere it stops at the device with a
// one-line error.
void expect_run_or_no_device(const std::string& flags, const std::function<void(const nlohmann::json&)>& check,
                             k3::TinyArch arch = k3::TinyArch::KimiLinear) {
  const std::string config = write_file("small.json", k3::tiny_config_json(arch, k3::TinySize::Small).dump());
  const std::string json = ::testing::TempDir() + "/bench.json";
  const CliResult r = run_k3("bench --synthetic " + config + " --batch 1,2 --context 70 --steps 3 --gpu-memory 3G --json " +
                             json + " " + flags);
  if (r.code == 0) {
    const nlohmann::json doc = nlohmann::json::parse(k3::test::slurp(json));
    ASSERT_EQ(doc["decode"].size(), 2u);
    // Kimi-Linear small: 32 experts, top-4. The profiled steps' picks name between k and E distinct
    // experts per MoE layer; a batch of one token names exactly k.
    for (const auto& row : doc["decode"]) {
      EXPECT_GT(row["tokens_per_s"].get<double>(), 0);
      EXPECT_GT(row["fraction_of_floor"].get<double>(), 0);
      EXPECT_GT(row["fraction_of_touched_floor"].get<double>(), 0);
      EXPECT_GE(row["experts_touched_per_layer"].get<double>(), 4);
      EXPECT_LE(row["experts_touched_per_layer"].get<double>(), 32);
    }
    EXPECT_EQ(doc["decode"][0]["experts_touched_per_layer"].get<double>(), 4);
    EXPECT_EQ(doc["prefill"]["tokens"], 70);
    EXPECT_NE(r.out.find("batch"), std::string::npos) << r.out;
    // The per-op breakdown: four profiled decode steps per batch size and one prefill chunk, whose
    // classes add up to the profiled step.
    for (const auto* part : {&doc["decode"][0], &doc["decode"][1], &doc["prefill"]}) {
      const nlohmann::json& ops = (*part)["op_breakdown"];
      EXPECT_EQ(ops["profiled_steps"], part == &doc["prefill"] ? 1 : 4);
      double sum = 0;
      for (const auto& [name, ms] : ops["ms_per_step"].items()) sum += ms.get<double>();
      EXPECT_NEAR(sum, ops["profiled_step_ms"].get<double>(), 1e-9 + 1e-9 * sum);
      EXPECT_GT(ops["ms_per_step"]["moe gemm1"].get<double>(), 0);
      EXPECT_GT(ops["ms_per_step"]["kda"].get<double>(), 0);
    }
    EXPECT_NE(r.out.find("per op class"), std::string::npos) << r.out;
    check(doc);
    return;
  }
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  const bool no_device = r.err.find("no CUDA device") != std::string::npos;
  const bool no_backend = r.err.find("without the CUDA backend") != std::string::npos;
  EXPECT_TRUE(no_device || no_backend) << r.err;
}

// A family's checkpoint: the report says which, and the floor counts its stored bytes.
TEST(CliBench, FamilyRunBenchmarksOrSaysThereIsNoDevice) {
  for (const std::string family : {"modelopt-mixed", "compressed-tensors-mxfp4", "modelslim-w4a8", "gguf"}) {
    SCOPED_TRACE(family);
    const std::string flags = "--family " + family + " --template-experts 3" + (family == "gguf" ? " --recipe q2_k_experts" : "");
    expect_run_or_no_device(flags, [&](const nlohmann::json& doc) {
      EXPECT_EQ(doc["family"], family);
      EXPECT_EQ(doc["template_experts"], 3);
      EXPECT_NE(doc["weights"].get<std::string>().find(family + (family == "gguf" ? " q2_k_experts" : "") + " checkpoint"),
                std::string::npos);
      EXPECT_GT(doc["decode"][0]["expert_bytes"].get<double>(), 0);
    });
  }
}

// A family's sample routes as --routing says (Kimi-K3 small: one expert group, which a skew needs).
TEST(CliBench, FamilyRunTakesARoutingSkewOrSaysThereIsNoDevice) {
  expect_run_or_no_device(
      "--family fp8-block --template-experts 3 --routing zipf:1.5",
      [](const nlohmann::json& doc) {
        EXPECT_EQ(doc["family"], "fp8-block");
        EXPECT_EQ(doc["routing"], "zipf:1.5");
      },
      k3::TinyArch::KimiK3);
}

TEST(CliBench, ValidRunBenchmarksOrSaysThereIsNoDevice) {
  expect_run_or_no_device("", [](const nlohmann::json& doc) { EXPECT_EQ(doc["experts_on_cpu"], 0); });
}

// Hybrid experts: the CPU's share of the picks, its time and the overlap against the all-GPU step.
TEST(CliBench, HybridRunReportsTheCpuShareOrSaysThereIsNoDevice) {
  expect_run_or_no_device("--experts-on-cpu 4", [](const nlohmann::json& doc) {
    EXPECT_EQ(doc["experts_on_cpu"], 4);
    EXPECT_FALSE(doc["graphs"].get<bool>());
    for (const auto& row : doc["decode"]) {
      EXPECT_GT(row["cpu_picks"].get<int64_t>() + row["gpu_picks"].get<int64_t>(), 0);
      EXPECT_GT(row["all_gpu_eager_ms"].get<double>(), 0);
      EXPECT_GE(row["overlap"].get<double>(), 0);
      EXPECT_LE(row["overlap"].get<double>(), 1);
      EXPECT_GT(row["op_breakdown"]["ms_per_step"]["cpu experts"].get<double>(), 0);
    }
  });
}

}  // namespace
