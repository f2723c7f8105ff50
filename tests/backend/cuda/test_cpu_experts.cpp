// Hybrid CPU/GPU experts (docs/cuda-backend.md "Hybrid CPU/GPU experts"): moe_map_experts against a
// host reference; the CUDA model with half of every MoE layer's experts on the CPU against the
// all-GPU run on the same checkpoint (bf16 and packed experts), over prefill and decode steps; the
// trained tiny Kimi-K3's greedy replies unchanged with its cold experts on the CPU; synthetic weights
// with CPU experts; and the option errors. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <span>
#include <utility>

#include "backend/cuda/core/upload.h"
#include "backend/cuda/executor/cuda_model.h"
#include "backend/cuda/moe/moe.h"
#include "cuda_test_util.h"
#include "model/engine_test_util.h"
#include "trained_replies.h"

namespace k3::cuda {
namespace {

TEST(MoeMapExperts, RenamesPicksToTheBanksIndices) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Arena& a = test::arena();
  const int64_t T = 37, k = 8, E = 64;
  std::vector<int32_t> map(static_cast<size_t>(E), -1), ids;
  int32_t next = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (rng.uniform_int(0, 2) != 0) map[static_cast<size_t>(e)] = next++;
  }
  for (int64_t i = 0; i < T * k; ++i) ids.push_back(i % 29 == 5 ? -1 : rng.uniform_int(0, static_cast<int>(E) - 1));
  const DeviceTensor d_ids = a.alloc_tensor(DType::kI32, T, k, "ids"), out = a.alloc_tensor(DType::kI32, T, k, "out");
  int32_t* d_map = a.alloc_n<int32_t>(map.size(), "map");
  copy_bytes_to_device(d_ids.data, ids.data(), ids.size() * sizeof(int32_t));
  copy_bytes_to_device(d_map, map.data(), map.size() * sizeof(int32_t));
  moe_map_experts(d_ids, d_map, E, out, nullptr);
  const std::vector<int32_t> got = download_i32(out);
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(got[i], ids[i] < 0 ? -1 : map[static_cast<size_t>(ids[i])]) << i;
}

EngineOptions hybrid_options(int64_t experts_on_cpu, const RoutingHistogram* histogram, uint64_t expert_cache = 0) {
  CudaOptions o;
  o.memory = "3G";
  o.max_sequences = 8;
  o.max_context = 1024;  // the trained model's eval prompts run to ~560 tokens
  o.experts_on_cpu = experts_on_cpu;
  o.cpu_expert_histogram = histogram;
  o.expert_cache_bytes = expert_cache;
  EngineOptions e;
  e.max_context = 1024;
  e.executor = [o](const K3Config& c, const LoadPlan& p, PlanFiles& f) { return make_cuda_executor(o, c, p, f); };
  return e;
}

class HybridExpertsModel : public ::testing::TestWithParam<FamilyId> {};

// Pinned routing picks experts 0..k−1 for every token; the histogram makes experts 0 and 1 the
// coldest, so the CPU computes two of each token's four picks and the GPU the other two. The CPU's
// experts multiply in float what the GPU's multiply in bf16, and each token's sum adds the two sides
// in another order: the CPU-vs-GPU bounds of test_cuda_model.cpp for Kimi-Linear small apply — 0.04
// where both take 16-bit activations, 0.3 for ModelSlim and GGUF, whose int8 activation codes flip
// between the two sides' slightly different GEMM 2 inputs (H200: bf16, NVFP4, MXFP4 ≤ 1.1e-2; W4A8
// 4.0e-2, GGUF 4.0e-2).
TEST_P(HybridExpertsModel, HalfTheExpertsOnTheCpuGiveTheAllGpuLogits) {
  K3_REQUIRE_GPU();
  const FamilyId family = GetParam();
  const k3::test::TinyCheckpoint ckpt = k3::test::make_tiny_pinned_routing(family, TinyArch::KimiLinear, 11, TinySize::Small);
  Engine all_gpu(ckpt.dir, hybrid_options(0, nullptr));
  const MoeConfig& moe = *all_gpu.config().moe;
  const int64_t E = moe.num_experts, N = E / 2;
  RoutingHistogram cold;
  cold.experts = E;
  for (int64_t l = 0; l < all_gpu.config().num_layers; ++l) {
    if (!all_gpu.config().is_moe(l)) continue;
    std::vector<uint64_t>& counts = cold.layers[l];
    counts.assign(static_cast<size_t>(E), 100);
    counts[0] = counts[1] = 0;
  }
  Engine hybrid(ckpt.dir, hybrid_options(N, &cold));
  const auto [prefill_err, decode_err] = k3::test::compare_engine_logits(hybrid, all_gpu);
  const bool int8_contract = family == FamilyId::ModelSlimW4A8 || family == FamilyId::Gguf;
  const double bound = int8_contract ? 0.3 : 0.04;
  EXPECT_LT(prefill_err, bound) << family_name(family);
  EXPECT_LT(decode_err, bound) << family_name(family);

  const CudaExecutorStats s = cuda_executor_stats(hybrid.executor()), r = cuda_executor_stats(all_gpu.executor());
  EXPECT_EQ(s.cpu_experts_per_layer, N);
  EXPECT_EQ(s.graph_replays, 0);  // graphs are off with CPU experts
  EXPECT_EQ(s.cpu_picks, s.gpu_picks);  // two of the four pinned picks each
  EXPECT_GT(s.cpu_picks, 0);
  EXPECT_GT(s.hybrid_layer_calls, 0);
  EXPECT_EQ(s.packed_expert_banks, r.packed_expert_banks);
  // The GPU holds E − N experts per layer: the other N experts' bytes left the device.
  EXPECT_EQ(r.weight_bytes - s.weight_bytes, s.gpu_expert_bytes * static_cast<uint64_t>(N) / static_cast<uint64_t>(E - N));
  std::printf("[ %s ] %lld of %lld experts per layer on the CPU: prefill rel err %.2e, decode rel err %.2e; %lld CPU and "
              "%lld GPU picks over %lld layer calls; CPU experts %.1f ms, waiting for their inputs %.1f ms\n",
              family_name(family), static_cast<long long>(N), static_cast<long long>(E), prefill_err, decode_err,
              static_cast<long long>(s.cpu_picks), static_cast<long long>(s.gpu_picks),
              static_cast<long long>(s.hybrid_layer_calls), s.cpu_expert_seconds * 1e3, s.cpu_wait_seconds * 1e3);
}

INSTANTIATE_TEST_SUITE_P(Families, HybridExpertsModel,
                         ::testing::Values(FamilyId::Bf16, FamilyId::ModelOptNvfp4, FamilyId::ModelSlimW4A8, FamilyId::Gguf,
                                           FamilyId::CompressedTensorsMxfp4),
                         test::CaseIndexName());

// The trained tiny Kimi-K3 (4 experts, top-2) with its last two experts on the CPU: greedy replies to
// the eval prompts, decoded in one continuous batch, are the all-GPU run's token for token.
TEST(HybridExpertsTrained, GreedyRepliesEqualTheAllGpuRun) {
  K3_REQUIRE_GPU();
  const std::string& model = k3::test::kTrainedModel;
  ASSERT_TRUE(std::filesystem::exists(model + "/config.json")) << model;
  Engine all_gpu(model, hybrid_options(0, nullptr));
  Engine hybrid(model, hybrid_options(2, nullptr));
  const k3::test::TrainedReplies r = k3::test::expect_same_trained_replies(hybrid, all_gpu, 8, 48);
  const CudaExecutorStats s = cuda_executor_stats(hybrid.executor());
  EXPECT_GT(s.cpu_picks, 0);
  EXPECT_GT(s.gpu_picks, 0);
  std::printf("[ trained kimi-k3 ] %zu prompts, %lld tokens: all-GPU %.2f s, 2 of 4 experts on the CPU %.2f s (%lld CPU, "
              "%lld GPU picks)\n",
              r.prompts, static_cast<long long>(r.got.generated_tokens), r.want.seconds, r.got.seconds,
              static_cast<long long>(s.cpu_picks), static_cast<long long>(s.gpu_picks));
}

void expect_flag_error(const std::function<void()>& make, const std::string& field, const std::string& words) {
  try {
    make();
    FAIL() << "accepted";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find(field), std::string::npos) << m;
    EXPECT_NE(m.find(words), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(HybridExpertsErrors, BadOptionsAreOneLineErrors) {
  K3_REQUIRE_GPU();
  const k3::test::TinyCheckpoint ckpt = k3::test::make_tiny_pinned_routing(FamilyId::Bf16, TinyArch::KimiLinear, 11);
  const int64_t E = parse_k3_config(parse_json(tiny_config_json(TinyArch::KimiLinear, TinySize::Tiny).dump(), "config.json")).moe->num_experts;
  expect_flag_error([&] { Engine e(ckpt.dir, hybrid_options(E, nullptr)); }, "--experts-on-cpu", "between 1 and");
  expect_flag_error([&] { Engine e(ckpt.dir, hybrid_options(1, nullptr, uint64_t{1} << 30)); }, "--experts-on-cpu", "choose one");
  CudaOptions o;
  o.memory = "1G";
  o.experts_on_cpu = E;
  const K3Config config = parse_k3_config(parse_json(tiny_config_json(TinyArch::KimiLinear, TinySize::Tiny).dump(), "config.json"));
  expect_flag_error([&] { make_synthetic_cuda_executor(o, config, 1); }, "--experts-on-cpu", "between 1 and");
}

// One 24-token prefill and three decode steps of one sequence over synthetic weights with
// `experts_on_cpu` experts of every MoE layer on the CPU: the logits of every step, and the stats.
std::pair<std::vector<float>, CudaExecutorStats> synthetic_logits(const K3Config& config, int64_t experts_on_cpu) {
  CudaOptions o;
  o.memory = "3G";
  o.max_sequences = 1;
  o.max_context = 128;
  o.experts_on_cpu = experts_on_cpu;
  const std::unique_ptr<Executor> ex = make_synthetic_cuda_executor(o, config, 5);
  std::vector<int64_t> prompt(24);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int64_t>((i * 7919 + 3) % static_cast<size_t>(config.vocab_size));
  ex->add_sequence(0, 0);
  const auto tables = disjoint_block_tables(1, o.max_context / 64);
  const BatchSlice prefill{0, 0, 24, &tables[0]};
  const int64_t last = 23, row = 0;
  std::vector<float> logits = ex->run(prompt, std::span(&prefill, 1), std::span(&last, 1)).data;
  for (int64_t step = 0; step < 3; ++step) {
    const BatchSlice decode{0, 0, 1, &tables[0]};
    const std::vector<int64_t> id = {prompt[static_cast<size_t>(step)]};
    const std::vector<float> more = ex->run(id, std::span(&decode, 1), std::span(&row, 1)).data;
    logits.insert(logits.end(), more.begin(), more.end());
  }
  return {logits, cuda_executor_stats(*ex)};
}

// Synthetic weights (`k3 bench --synthetic … --experts-on-cpu N`): the CPU's experts are host copies
// of the generated bf16 banks. The synthetic router is random and cannot be pinned, and a near-tied
// pick that flips between the CPU's float and the GPU's bf16 moves a random model's logits by O(1);
// so every token picks every expert here (make-tiny's small config with 4 experts, top-4, one group).
// Kimi-Linear's model is cut to two layers, a dense KDA layer and a MoE MLA layer, so that its routed
// sum reaches the logits through the final norm and lm_head alone. Half the experts on the CPU, the
// logits stay within the pinned checkpoint test's bound of the all-GPU run's; a CPU expert bound to
// the wrong rows, or a dropped, doubled or mis-scaled CPU sum, moves them by O(1).
class HybridExpertsSynthetic : public ::testing::TestWithParam<TinyArch> {};

TEST_P(HybridExpertsSynthetic, HalfTheExpertsOnTheCpuStayNearTheAllGpuLogits) {
  K3_REQUIRE_GPU();
  const TinyArch arch = GetParam();
  Json doc = tiny_config_json(arch, TinySize::Small);
  Json& text = text_config_of(doc);
  text["num_experts"] = 4;
  text["num_experts_per_token"] = 4;
  text["num_expert_group"] = 1;
  if (arch == TinyArch::KimiLinear) {
    text["num_hidden_layers"] = 2;
    text["linear_attn_config"]["kda_layers"] = Json::array({1});
    text["linear_attn_config"]["full_attn_layers"] = Json::array({2});
  }
  const K3Config config = parse_k3_config(parse_json(doc.dump(), "config.json"));
  const int64_t E = config.moe->num_experts;
  const auto [all_gpu, r] = synthetic_logits(config, 0);
  const auto [hybrid, s] = synthetic_logits(config, E / 2);
  ASSERT_EQ(all_gpu.size(), hybrid.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < all_gpu.size(); ++i) {
    ASSERT_TRUE(std::isfinite(hybrid[i])) << i;
    diff = std::max(diff, static_cast<double>(std::fabs(hybrid[i] - all_gpu[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(all_gpu[i])));
  }
  EXPECT_LT(diff / scale, 0.04);
  EXPECT_EQ(s.cpu_experts_per_layer, E / 2);
  EXPECT_GT(s.cpu_picks, 0);
  EXPECT_GT(s.gpu_picks, 0);
  EXPECT_EQ(s.graph_replays, 0);
  EXPECT_LT(s.weight_bytes, r.weight_bytes);  // the CPU's experts left the device
  std::printf("[ synthetic %s small, %lld layers ] %lld of %lld experts on the CPU: rel err %.2e; %lld CPU, %lld GPU picks\n",
              arch == TinyArch::KimiK3 ? "kimi-k3" : "kimi-linear", static_cast<long long>(config.num_layers),
              static_cast<long long>(E / 2), static_cast<long long>(E), diff / scale, static_cast<long long>(s.cpu_picks),
              static_cast<long long>(s.gpu_picks));
}

INSTANTIATE_TEST_SUITE_P(Archs, HybridExpertsSynthetic, ::testing::Values(TinyArch::KimiK3, TinyArch::KimiLinear),
                         test::CaseIndexName());

}  // namespace
}  // namespace k3::cuda
