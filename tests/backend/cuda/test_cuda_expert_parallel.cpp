// Expert parallelism on the CUDA backend (docs/cuda-backend.md "Expert parallelism"): in-process
// ranks, each a CUDA executor holding its split of every MoE layer's routed experts, here all on one
// GPU (each rank its own arena), against the one-executor run on the same checkpoint. The ranks'
// partial routed sums are added in rank order where one executor adds every pick in pick order: only
// fp32 reassociation of the routed sum differs. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "backend/cuda/executor/cuda_model.h"
#include "cuda_test_util.h"
#include "model/engine_test_util.h"
#include "runtime/parallel_executor.h"
#include "trained_replies.h"

namespace k3::cuda {
namespace {

CudaOptions rank_options(int64_t experts_on_cpu = 0, const RoutingHistogram* histogram = nullptr) {
  CudaOptions o;
  o.experts_on_cpu = experts_on_cpu;
  o.cpu_expert_histogram = histogram;
  o.memory = "2G";
  o.max_sequences = 8;
  o.max_context = 1024;  // the trained model's eval prompts run to ~560 tokens
  o.dense_linears = DenseLinears::kPacked;  // the banked linears of every rank too
  return o;
}

// One executor (ranks == 1) or `ranks` expert-parallel ranks on device 0, each with `o`.
EngineOptions expert_parallel(int ranks, const CudaOptions& o = rank_options()) {
  EngineOptions e;
  e.max_context = 1024;
  e.executor = [ranks, o](const K3Config& c, const LoadPlan& p, PlanFiles& f) -> std::unique_ptr<Executor> {
    if (ranks == 1) return make_cuda_executor(o, c, p, f);
    return make_rank_executors(ranks, [&c, &p, &f, o](Communicator& rank) {
      return make_cuda_executor(o, c, p, f, ParallelRanks{.experts = &rank});
    });
  };
  return e;
}

// Pinned routing spread over the experts: every token picks experts 0, E/k, 2E/k, … (the correction
// bias, selection only), so with 2 or 4 ranks every rank computes some of every token's picks.
k3::test::TinyCheckpoint spread_routing(FamilyId family) {
  const K3Config config = parse_k3_config(parse_json(tiny_config_json(TinyArch::KimiLinear, TinySize::Small).dump(), "config.json"));
  const int64_t E = config.moe->num_experts, k = config.moe->experts_per_token;
  auto pin = [E, k](MasterWeights& master) {
    for (auto& [name, values] : master.values) {
      if (name.find("e_score_correction_bias") == std::string::npos) continue;
      std::fill(values.begin(), values.end(), 0.0f);
      for (int64_t j = 0; j < k; ++j) values[static_cast<size_t>(j * (E / k))] = 100.0f;
    }
  };
  return k3::test::make_tiny_conditioned(family, TinyArch::KimiLinear, 11, TinySize::Small, pin, "spread_");
}

class CudaExpertParallelModel : public ::testing::TestWithParam<FamilyId> {};

// The logits of a one-token step: one row per layer, so a flipped rounding has no later rows of
// the same layer to spread to.
double one_token_error(Engine& got, Engine& want) {
  const std::vector<int64_t> token = k3::test::test_prompt(1, want.config().vocab_size);
  return k3::test::relative_max_error(k3::test::prefill_logits(got, token), k3::test::prefill_logits(want, token));
}

// Only fp32 reassociation of the routed sum differs, but where it flips a bf16 rounding of a later
// layer's input, this random 8-layer model amplifies the flip to O(1). Measured over 40-token
// prefills: 2 ranks give the one executor's logits exactly (H100 and H200); 4 ranks 3.2e-3 on the
// H200 but 0.34 (bf16) and 0.44 (NVFP4) on the H100, whose kernel choices differ (the W4A4 contract
// test shows the same card dependence). So 2 ranks are bounded over the 40-token prefill by the
// same-contract bound of test_cuda_model.cpp, 0.04; 4 ranks by it over a one-token step (exact on
// the H200), with the 40-token and decode figures reported; the trained model below bounds decode
// (greedy replies equal).
TEST_P(CudaExpertParallelModel, RanksOnOneGpuGiveTheOneExecutorLogits) {
  K3_REQUIRE_GPU();
  const FamilyId family = GetParam();
  const k3::test::TinyCheckpoint ckpt = spread_routing(family);
  Engine one(ckpt.dir, expert_parallel(1));
  for (const int ranks : {2, 4}) {
    Engine ep(ckpt.dir, expert_parallel(ranks));
    const double token_err = one_token_error(ep, one);
    const auto [prefill_err, decode_err] = k3::test::compare_engine_logits(ep, one);
    EXPECT_LT(ranks == 2 ? prefill_err : token_err, 0.04) << family_name(family) << ", " << ranks << " ranks";
    std::printf("[ %s ] %d expert-parallel ranks on one GPU vs one executor: one token rel err %.2e, prefill %.2e, "
                "decode %.2e\n",
                family_name(family), ranks, token_err, prefill_err, decode_err);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaExpertParallelModel,
                         ::testing::Values(FamilyId::Bf16, FamilyId::ModelOptNvfp4, FamilyId::Gguf),
                         test::CaseIndexName());

// The trained tiny Kimi-K3 (4 experts, top-2) over 2 ranks (experts {0, 1} and {2, 3}): greedy
// replies to the eval prompts, decoded in one continuous batch, are the one-executor run's.
TEST(CudaExpertParallelTrained, GreedyRepliesEqualTheOneExecutorRun) {
  K3_REQUIRE_GPU();
  const std::string& model = k3::test::kTrainedModel;
  ASSERT_TRUE(std::filesystem::exists(model + "/config.json")) << model;
  Engine one(model, expert_parallel(1));
  Engine ep(model, expert_parallel(2));
  const k3::test::TrainedReplies r = k3::test::expect_same_trained_replies(ep, one, 4, 48);
  std::printf("[ trained kimi-k3 ] %zu prompts, %lld tokens: one executor %.2f s, 2 expert-parallel ranks on one GPU %.2f s\n",
              r.prompts, static_cast<long long>(r.got.generated_tokens), r.want.seconds, r.got.seconds);
}

// Expert parallelism with CPU experts: each rank computes one expert of its split on the CPU (the
// coldest there: experts 0 and 16 of the spread routing's picks 0, 8, 16, 24), the rest of its split
// on the GPU. The CPU experts multiply in float what the GPU multiplies in bf16; the random model
// amplifies that as above (40-token prefill: 6.7e-3 on the H200, 0.125 on the H100), so the hybrid
// test's bound, 0.04, holds a one-token step, and the trained model below bounds the replies.
TEST(CudaExpertParallelHybrid, EachRankComputesSomeOfItsExpertsOnTheCpu) {
  K3_REQUIRE_GPU();
  const k3::test::TinyCheckpoint ckpt = spread_routing(FamilyId::Bf16);
  Engine one(ckpt.dir, expert_parallel(1));
  RoutingHistogram cold;
  cold.experts = one.config().moe->num_experts;
  for (int64_t l = 0; l < one.config().num_layers; ++l) {
    if (!one.config().is_moe(l)) continue;
    std::vector<uint64_t>& counts = cold.layers[l];
    counts.assign(static_cast<size_t>(cold.experts), 100);
    counts[0] = counts[16] = 0;
  }
  Engine ep(ckpt.dir, expert_parallel(2, rank_options(1, &cold)));
  const double token_err = one_token_error(ep, one);
  const auto [prefill_err, decode_err] = k3::test::compare_engine_logits(ep, one);
  EXPECT_LT(token_err, 0.04);
  std::printf("[ bf16 ] 2 expert-parallel ranks with 1 CPU expert each vs one executor: one token rel err %.2e, "
              "prefill %.2e, decode %.2e\n",
              token_err, prefill_err, decode_err);
}

// The trained tiny Kimi-K3 over 2 ranks, each computing one expert of its split on its CPU (the last:
// experts 1 and 3) and the other on the GPU: greedy replies equal the one-executor run's.
TEST(CudaExpertParallelHybridTrained, GreedyRepliesEqualTheOneExecutorRun) {
  K3_REQUIRE_GPU();
  const std::string& model = k3::test::kTrainedModel;
  ASSERT_TRUE(std::filesystem::exists(model + "/config.json")) << model;
  Engine one(model, expert_parallel(1));
  Engine ep(model, expert_parallel(2, rank_options(1)));
  const k3::test::TrainedReplies r = k3::test::expect_same_trained_replies(ep, one, 4, 48);
  std::printf("[ trained kimi-k3 ] %zu prompts, %lld tokens: one executor %.2f s, 2 expert-parallel ranks with a CPU "
              "expert each %.2f s\n",
              r.prompts, static_cast<long long>(r.got.generated_tokens), r.want.seconds, r.got.seconds);
}

TEST(CudaExpertParallelErrors, NotWithExpertStreaming) {
  K3_REQUIRE_GPU();
  const k3::test::TinyCheckpoint ckpt = k3::test::make_tiny_pinned_routing(FamilyId::Bf16, TinyArch::KimiLinear, 11);
  CudaOptions o = rank_options();
  o.expert_cache_bytes = uint64_t{1} << 30;
  try {
    Engine bad(ckpt.dir, expert_parallel(2, o));
    FAIL() << "accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("--expert-parallel"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace k3::cuda
