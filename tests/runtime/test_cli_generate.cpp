// `k3 logits` and `k3 generate` through the CLI: the transformers peer fixture (a checkpoint the
// public implementation wrote, with its float64 logits and greedy continuation), the JSON report,
// and the one-line errors for bad ids and flags.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>

#include "io/npy.h"
#include "model/engine_test_util.h"
#include "runtime/generate.h"
#include "tools/cli_runner.h"

namespace k3 {
namespace {

std::string peer(const std::string& rel) { return test::shared_dir() + "/fixtures/kimi-linear-peer/" + rel; }

nlohmann::json expected() {
  std::ifstream in(peer("expected.json"));
  return nlohmann::json::parse(in);
}

std::string id_list(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

TEST(CliPeerFixture, LogitsMatchTheTransformersFloat64Logits) {
  const std::string out = ::testing::TempDir() + "/k3_peer_logits.npy";
  const std::vector<int64_t> ids = expected()["prompt_ids"].get<std::vector<int64_t>>();
  const test::CliResult r = test::run_k3("logits --model " + peer("ckpt") + " --ids " + id_list(ids) + " --out " + out + " --threads 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const NpyArray got = read_npy(out);
  const NpyArray want = read_npy(peer("logits.npy"));
  ASSERT_EQ(got.dtype, "<f4");
  ASSERT_EQ(got.shape, want.shape);
  const float* g = reinterpret_cast<const float*>(got.data.data());
  const double* w = reinterpret_cast<const double*>(want.data.data());
  // fp32 engine vs the peer's float64 run (whose KDA kernel is itself fp32 inside): ≤ 1e-4 relative.
  EXPECT_LT(test::relative_max_error(std::vector<float>(g, g + got.numel()), std::vector<double>(w, w + want.numel())), 1e-4);
}

TEST(CliPeerFixture, GreedyGenerationReproducesTheContinuation) {
  const nlohmann::json e = expected();
  const test::CliResult r = test::run_k3("generate --model " + peer("ckpt") + " --ids " +
                                         id_list(e["prompt_ids"].get<std::vector<int64_t>>()) +
                                         " --greedy --max-tokens 12 --json --threads 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string last = r.out.substr(r.out.rfind('{'));
  const nlohmann::json j = nlohmann::json::parse(last);
  EXPECT_EQ(j["generated_ids"].get<std::vector<int64_t>>(), e["greedy_continuation"].get<std::vector<int64_t>>());
  EXPECT_EQ(j["prompt_tokens"], 37);
  EXPECT_EQ(j["decode_steps"], 11);
  EXPECT_GT(j["prefill_tok_s"].get<double>(), 0.0);
  EXPECT_GT(j["decode_tok_s"].get<double>(), 0.0);
}

TEST(CliPeerFixture, PlainOutputIsTheIdsOnOneLine) {
  const test::CliResult r = test::run_k3("generate --model " + peer("ckpt") + " --ids 360,96,364 --max-tokens 3 --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), ' '), 2);
}

TEST(CliPeerFixture, SamplingIsDeterministicForASeed) {
  const std::string args = "generate --model " + peer("ckpt") + " --ids 360,96,364 --max-tokens 8 --temperature 0.8 --top-p 0.9 --top-k 40 --seed 3 --ignore-eos";
  const test::CliResult a = test::run_k3(args), b = test::run_k3(args);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

// The model divided among in-process ranks (experts, tensors, both): the same sampled tokens
// (bit-identical logits).
TEST(CliPeerFixture, ParallelLayoutsGiveTheSameSamples) {
  const std::string args = "generate --model " + peer("ckpt") + " --ids 360,96,364 --max-tokens 8 --temperature 0.8 --seed 3 --ignore-eos";
  const test::CliResult one = test::run_k3(args);
  ASSERT_EQ(one.code, 0) << one.err;
  for (const char* layout : {" --expert-parallel 4", " --tensor-parallel 3", " --tensor-parallel 2 --expert-parallel 4"}) {
    const test::CliResult got = test::run_k3(args + layout);
    ASSERT_EQ(got.code, 0) << layout << ": " << got.err;
    EXPECT_EQ(got.out, one.out) << layout;
  }
  for (const char* flag : {"--expert-parallel", "--tensor-parallel"}) {
    const test::CliResult bad = test::run_k3(args + " " + flag + " 0");
    EXPECT_EQ(bad.code, 2) << bad.err;
    EXPECT_NE(bad.err.find(flag), std::string::npos) << bad.err;
  }
  // Experts placed from the routing this very command records: the same tokens.
  const std::string histogram = "/tmp/k3_cli_routing_" + std::to_string(::getpid()) + ".json";
  ASSERT_EQ(test::run_k3(args + " --record-routing " + histogram).code, 0);
  const test::CliResult placed = test::run_k3(args + " --expert-parallel 3 --expert-placement " + histogram);
  ASSERT_EQ(placed.code, 0) << placed.err;
  EXPECT_EQ(placed.out, one.out);
  EXPECT_NE(placed.err.find("expert placement: 3 ranks, 1 redundant per rank"), std::string::npos) << placed.err;
  const test::CliResult alone = test::run_k3(args + " --expert-placement " + histogram);
  EXPECT_EQ(alone.code, 1);
  EXPECT_NE(alone.err.find("'--expert-placement': places the experts among ranks"), std::string::npos) << alone.err;
  const test::CliResult on_gpus = test::run_k3(args + " --device cuda --expert-parallel 3 --expert-placement " + histogram);
  EXPECT_EQ(on_gpus.code, 1);
  EXPECT_NE(on_gpus.err.find("the CUDA backend's expert-parallel ranks take the contiguous split"), std::string::npos) << on_gpus.err;
  std::remove(histogram.c_str());
  const test::CliResult uneven = test::run_k3(args + " --tensor-parallel 2 --expert-parallel 3");
  EXPECT_EQ(uneven.code, 1) << uneven.err;
  EXPECT_NE(uneven.err.find("'--expert-parallel': 3 is not a multiple of --tensor-parallel 2"), std::string::npos) << uneven.err;
}

// --nnodes (tools/node_ranks.h) starts CUDA ranks over NCCL; its flags are checked before any rank
// process starts.
TEST(CliErrors, NodeRankFlagsAreCheckedBeforeAnyRankStarts) {
  const std::string args = "generate --model " + peer("ckpt") + " --ids 360,96 --max-tokens 2";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --nnodes 2 --expert-parallel 2", "field '--nnodes': starts CUDA ranks over NCCL (--device cuda); CPU ranks in several "
                                          "processes run under mpirun"},
      {" --node-rank 1", "field '--node-rank': --node-rank, --master-addr and --master-port go with --nnodes"},
      {" --master-addr 10.0.0.1", "field '--node-rank': --node-rank, --master-addr and --master-port go with --nnodes"},
      {" --device cuda --expert-parallel 3 --nnodes 2",
       "field '--nnodes': 3 ranks (--tensor-parallel, --expert-parallel) do not divide over 2 nodes"},
      {" --device cuda --expert-parallel 2 --nnodes 2 --node-rank 2", "field '--node-rank': 2 is not a node of 2"},
      {" --device cuda --tensor-parallel 2 --nnodes 3",
       "field '--nnodes': 2 ranks (--tensor-parallel, --expert-parallel) do not divide over 3 nodes"},
  };
  for (const auto& [flags, err] : cases) {
    const test::CliResult got = test::run_k3(args + flags);
    EXPECT_EQ(got.code, 1) << flags << ": " << got.err;
    EXPECT_EQ(got.err, "k3 generate: error: " + err + "\n") << flags;
  }
  for (const char* flags : {" --nnodes 0", " --master-port 70000", " --node-rank -1"}) {
    const test::CliResult got = test::run_k3(args + flags);
    EXPECT_EQ(got.code, 2) << flags << ": " << got.err;
  }
}

// The node's supervisor: rank processes on GPUs no machine has (cuda:60, cuda:61) fail after meeting
// at the rendezvous; the command names the first that exits and ends with 1, promptly. Needs a k3 built
// with NCCL (CUDA toolkit and NCCL found), else that refusal is checked.
TEST(CliErrors, NodeRanksThatFailEndTheNodesCommand) {
  const std::string args = "generate --model " + peer("ckpt") + " --ids 360,96 --max-tokens 2 --device cuda:60 --expert-parallel 2 "
                           "--nnodes 1 --rank-timeout 20 --master-port " + std::to_string(29400 + ::getpid() % 500);
  const auto started = std::chrono::steady_clock::now();
  const test::CliResult got = test::run_k3(args);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
  EXPECT_EQ(got.code, 1) << got.err;
  if (got.err.find("built without NCCL") != std::string::npos) {
    EXPECT_EQ(got.err, "k3 generate: error: field '--nnodes': this k3 was built without NCCL (configure with the CUDA backend "
                       "and NCCL found, or -DK3_NCCL_ROOT=DIR)\n");
    return;
  }
  EXPECT_NE(got.err.find("k3 generate: error: rank 0 of 2: NCCL world: cudaSetDevice: "), std::string::npos) << got.err;
  EXPECT_NE(got.err.find("k3: node 0: rank "), std::string::npos) << got.err;
  EXPECT_NE(got.err.find(" exited with code 1; ending this node's other ranks\n"), std::string::npos) << got.err;
}

TEST(CliErrors, BadIdsAndFlagsGiveOneLine) {
  const std::string model = " --model " + peer("ckpt");
  struct Case {
    std::string args;
    int code;
    std::string err;
  };
  const std::vector<Case> cases = {
      {"generate" + model + " --ids 1,512", 1, "k3 generate: error: field '--ids': token id 512 is out of range [0, 512)\n"},
      {"generate" + model + " --ids 1,x", 1, "k3 generate: error: field '--ids': 'x' is not an integer token id\n"},
      {"logits" + model + " --ids 1,,2 --out /tmp/x.npy", 1, "k3 logits: error: field '--ids': '' is not an integer token id\n"},
      {"generate" + model + " --ids 1 --temperature 0", 2, "k3: usage error: --temperature: '0' is not a number in (0, 100] (see k3 --help)\n"},
      {"generate" + model + " --ids 1 --device tpu", 2, "k3: usage error: --device: 'tpu' is not a device (cpu, cuda or cuda:N) (see k3 --help)\n"},
      {"logits" + model + " --ids 1 --out /tmp/x.npy --device cuda:x", 2, "k3: usage error: --device: 'cuda:x' is not a device (cpu, cuda or cuda:N) (see k3 --help)\n"},
  };
  for (const Case& c : cases) {
    const test::CliResult r = test::run_k3(c.args);
    EXPECT_EQ(r.code, c.code) << c.args;
    EXPECT_EQ(r.err, c.err) << c.args;
  }
  for (const std::string& bad : std::vector<std::string>{"generate" + model + " --ids 1 --greedy --temperature 1", "generate" + model + " --ids 1 --top-p 0.5",
                                "generate" + model + " --ids 1 --max-tokens -1", "generate" + model + " --ids 1 --bogus",
                                "logits" + model + " --ids 1 --out /tmp/x.npy --activations w4a4"}) {
    const test::CliResult r = test::run_k3(bad);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("k3: usage error: ", 0), 0u) << r.err;
  }
}

// --expert-cache (CUDA expert streaming): a bad size is a usage error (exit 2), a CPU run an error
// (exit 1), one line before any device is touched (tests/backend/cuda/test_expert_streaming.cpp runs
// the streaming itself).
TEST(CliErrors, CudaOptionFlagsGiveOneLine) {
  const std::string model = " --model " + peer("ckpt");
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"generate" + model + " --ids 1 --expert-cache 2G", 1,
       "k3 generate: error: field '--expert-cache': streams experts to a GPU: it needs --device cuda\n"},
      {"generate" + model + " --ids 1 --expert-cache 2X --device cuda", 2,
       "k3: usage error: --expert-cache: '2X' is not a size (e.g. 8G, 512M, or bytes) (see k3 --help)\n"},
      {"logits" + model + " --ids 1 --out /tmp/x.npy --expert-cache 50%", 2,
       "k3: usage error: --expert-cache: '50%' is not a size (e.g. 8G, 512M, or bytes) (see k3 --help)\n"},
      {"generate" + model + " --ids 1 --expert-cache 0 --device cuda", 2,
       "k3: usage error: --expert-cache: '0' must be at least one byte and at most 1e18 (see k3 --help)\n"},
      {"generate" + model + " --ids 1 --expert-cache -1G --device cuda", 2,
       "k3: usage error: --expert-cache: '-1G' must be at least one byte and at most 1e18 (see k3 --help)\n"},
  };
  for (const auto& [args, code, err] : cases) {
    const test::CliResult r = test::run_k3(args);
    EXPECT_EQ(r.code, code) << args;
    EXPECT_EQ(r.err, err) << args;
  }
}

// --max-context: prompt (+ --max-tokens) longer than the limit is refused before any work, naming
// the flag and the lengths. Without the flag the CPU limit is the config's max_position_embeddings
// (the make-tiny config has none: 4096).
TEST(CliContext, OverLongRequestsAreRefusedBeforeAnyWork) {
  const std::string model = " --model " + peer("ckpt");
  const test::CliResult gen = test::run_k3("generate" + model + " --ids 1,2,3 --max-tokens 2 --max-context 4");
  EXPECT_EQ(gen.code, 1);
  EXPECT_EQ(gen.err, "k3 generate: error: field '--max-context': the prompt's 3 tokens plus 2 tokens to generate exceed the context limit of 4 tokens\n");
  EXPECT_EQ(gen.out, "");
  EXPECT_EQ(test::run_k3("generate" + model + " --ids 1,2,3 --max-tokens 1 --max-context 4").code, 0);
  const std::string out = ::testing::TempDir() + "/k3_context_logits.npy";
  const test::CliResult logits = test::run_k3("logits" + model + " --ids 1,2,3,4,5 --max-context 4 --out " + out);
  EXPECT_EQ(logits.code, 1);
  EXPECT_EQ(logits.err, "k3 logits: error: field '--max-context': the prompt's 5 tokens exceed the context limit of 4 tokens\n");
  EXPECT_FALSE(std::filesystem::exists(out));

  const std::string dir = ::testing::TempDir() + "/k3_cli_context_tiny";
  std::filesystem::remove_all(dir);
  ASSERT_EQ(test::run_k3("make-tiny --arch kimi-linear --out " + dir).code, 0);
  std::string ids = "1";
  for (int i = 1; i < 4097; ++i) ids += ",1";
  const test::CliResult deflt = test::run_k3("generate --model " + dir + " --ids " + ids + " --max-tokens 0");
  EXPECT_EQ(deflt.code, 1);
  EXPECT_EQ(deflt.err, "k3 generate: error: field '--max-context': the prompt's 4097 tokens exceed the context limit of 4096 tokens\n");
  // A prompt longer than one prefill step (kPrefillChunk) prints no progress when stderr is not a terminal.
  std::string long_ids = "1";
  for (int64_t i = 1; i < kPrefillChunk + 20; ++i) long_ids += "," + std::to_string(i % 200);
  const test::CliResult quiet = test::run_k3("generate --model " + dir + " --ids " + long_ids + " --max-tokens 1 --threads 2");
  EXPECT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  std::filesystem::remove_all(dir);
}

// --activations bf16 reproduces the GPU's rounding on the CPU: with --device cuda it is refused (a
// CUDA build names the flag before touching a device; a build without CUDA names the backend).
TEST(CliErrors, Bf16ActivationsAreCpuOnly) {
  const test::CliResult r =
      test::run_k3("logits --model " + peer("ckpt") + " --ids 1,2 --out /tmp/x.npy --device cuda --activations bf16");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.err.find("field '--activations': 'bf16' applies to the CPU backend only") != std::string::npos ||
              r.err.find("without the CUDA backend") != std::string::npos)
      << r.err;
}

// --device cuda: runs where a GPU is (tests/backend/cuda compares the results); without one — or in a build
// without CUDA — a one-line error naming the flag, exit 1.
TEST(CliErrors, CudaDeviceRunsOrNamesWhatIsMissing) {
  const test::CliResult r = test::run_k3("logits --model " + peer("ckpt") + " --ids 1,2 --out /tmp/x.npy --device cuda");
  if (r.code == 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.err.find("field '--device': no CUDA device is available") != std::string::npos ||
              r.err.find("without the CUDA backend") != std::string::npos)
      << r.err;
}

// `k3 logits` of the tiny checkpoint in dir under --activations `mode`.
std::vector<float> logits_with_activations(const std::string& dir, const std::string& mode) {
  const std::string out = (std::filesystem::path(dir) / (mode + ".npy")).string();
  const test::CliResult r = test::run_k3("logits --model " + dir + " --ids 5,6,7,8 --out " + out + " --activations " + mode);
  EXPECT_EQ(r.code, 0) << r.err;
  if (r.code != 0) return {};
  const NpyArray a = read_npy(out);
  const float* p = reinterpret_cast<const float*>(a.data.data());
  return std::vector<float>(p, p + a.numel());
}

// --activations checkpoint switches quantized linears to the checkpoint's activation contract (NVFP4
// W4A4; e4m3 activations for FP8 — the maths of both is pinned in tests/backend/cpu): the logits
// move — 4-bit activations on a tiny random model move them a lot — and stay finite.
TEST(CliActivations, CheckpointContractChangesQuantizedLogits) {
  for (const std::string family : {"modelopt-nvfp4", "modelopt-fp8", "fp8-block"}) {
    const std::string dir = ::testing::TempDir() + "/k3_cli_contract_" + family;
    std::filesystem::remove_all(dir);
    ASSERT_EQ(test::run_k3("make-tiny --arch kimi-k3 --family " + family + " --out " + dir).code, 0);
    const std::vector<float> base = logits_with_activations(dir, "weight-only");
    const std::vector<float> contract = logits_with_activations(dir, "checkpoint");
    ASSERT_FALSE(base.empty() || contract.empty()) << family;
    const double diff = test::relative_max_error(contract, std::vector<double>(base.begin(), base.end()));
    EXPECT_GT(diff, 1e-4) << family;
    for (float v : contract) ASSERT_TRUE(std::isfinite(v)) << family;
  }
}

TEST(CliActivations, Bf16RoundsTheLinearInputs) {
  const std::string dir = ::testing::TempDir() + "/k3_cli_bf16_inputs";
  std::filesystem::remove_all(dir);
  ASSERT_EQ(test::run_k3("make-tiny --arch kimi-linear --out " + dir).code, 0);
  const std::vector<float> base = logits_with_activations(dir, "weight-only");
  const std::vector<float> rounded = logits_with_activations(dir, "bf16");
  ASSERT_FALSE(base.empty() || rounded.empty());
  const double diff = test::relative_max_error(rounded, std::vector<double>(base.begin(), base.end()));
  EXPECT_GT(diff, 1e-5);
  EXPECT_LT(diff, 0.2);
}

}  // namespace
}  // namespace k3
