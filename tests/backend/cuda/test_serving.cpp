// The serving loop (runtime/scheduler.h) over the CUDA executor on a small Kimi-K3 checkpoint:
//   - the prefix cache on the GPU (shared pages read through the block tables, KDA states restored
//     from device snapshots) gives a hit the logprobs of a miss: the hit runs the same prompt pieces
//     on the same kernels, so they are expected bit for bit (the bound allows 1e-4 of rounding);
//   - greedy picks made on the device (argmax kernel) equal the host's picks from the same logits;
//   - sampling on the device (temperature, top-k, top-p, min-p, penalties, per-request seeds);
//   - batch composition: concurrent requests share GEMMs, which changes their rounding; the test
//     reports how many greedy tokens still agree with each request run alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>

#include "backend/cuda/executor/cuda_model.h"
#include "cuda_test_util.h"
#include "model/engine_test_util.h"
#include "runtime/collecting_sink.h"
#include "runtime/scheduler.h"

namespace k3::cuda {
namespace {

using k3::test::Collected;
using k3::test::Collector;

EngineOptions serving_options() {
  CudaOptions o;
  o.memory = "4G";
  o.max_sequences = 16;
  o.max_context = 512;
  o.snapshot_slots = 16;
  EngineOptions e;
  e.max_context = o.max_context;
  e.executor = [o](const K3Config& c, const LoadPlan& p, PlanFiles& f) { return make_cuda_executor(o, c, p, f); };
  return e;
}

RequestSpec request(std::vector<int64_t> prompt, int64_t max_tokens, int top_logprobs) {
  RequestSpec s;
  s.prompt = std::move(prompt);
  s.max_tokens = max_tokens;
  s.top_logprobs = top_logprobs;
  return s;
}

Collected run_alone(Engine& engine, const SchedulerOptions& options, const RequestSpec& spec) {
  Scheduler s(engine, options);
  Collected c;
  s.submit(spec, std::make_shared<Collector>(c));
  while (s.step_once()) {
  }
  return c;
}

TEST(CudaServing, PrefixHitMatchesAMiss) {
  K3_REQUIRE_GPU();
  const k3::test::TinyCheckpoint ckpt =
      k3::test::make_tiny_pinned_routing(FamilyId::Bf16, TinyArch::KimiK3, 11, TinySize::Small);
  Engine gpu(ckpt.dir, serving_options());
  const int64_t vocab = gpu.config().vocab_size;
  const std::vector<int64_t> system = k3::test::test_prompt(200, vocab, 1);
  std::vector<int64_t> a = system, b = system;
  for (int64_t t : k3::test::test_prompt(30, vocab, 2)) a.push_back(t);
  for (int64_t t : k3::test::test_prompt(45, vocab, 3)) b.push_back(t);
  SchedulerOptions so;
  so.max_batch_tokens = 64;
  SchedulerOptions off = so;
  off.prefix_cache = false;
  const Collected miss = run_alone(gpu, off, request(b, 6, 5));
  Scheduler s(gpu, so);
  Collected first, hit;
  s.submit(request(a, 6, 5), std::make_shared<Collector>(first));
  while (s.step_once()) {
  }
  s.submit(request(b, 6, 5), std::make_shared<Collector>(hit));
  while (s.step_once()) {
  }
  EXPECT_EQ(hit.cached, 192);
  EXPECT_EQ(hit.ids, miss.ids);
  ASSERT_EQ(hit.logprobs.size(), miss.logprobs.size());
  double worst = 0;
  for (size_t i = 0; i < hit.logprobs.size(); ++i) worst = std::max(worst, std::fabs(double(hit.logprobs[i].logprob) - miss.logprobs[i].logprob));
  std::printf("[ serving ] prefix hit vs miss: max |logprob difference| %.3g over %zu tokens\n", worst, hit.logprobs.size());
  EXPECT_LE(worst, 1e-4);
}

TEST(CudaServing, DeviceGreedyPicksAndBatchComposition) {
  K3_REQUIRE_GPU();
  const k3::test::TinyCheckpoint ckpt =
      k3::test::make_tiny_pinned_routing(FamilyId::Bf16, TinyArch::KimiK3, 11, TinySize::Small);
  Engine gpu(ckpt.dir, serving_options());
  const int64_t vocab = gpu.config().vocab_size;
  SchedulerOptions so;
  so.prefix_cache = false;
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 12; ++i) specs.push_back(request(k3::test::test_prompt(5 + 23 * i, vocab, 10 + i), 8, -1));
  // Alone: greedy on the device (no logprobs), and with logprobs (the host picks from the logits).
  int64_t same_pick = 0, picks = 0;
  std::vector<Collected> alone;
  for (const RequestSpec& spec : specs) {
    alone.push_back(run_alone(gpu, so, spec));
    RequestSpec with_logprobs = spec;
    with_logprobs.top_logprobs = 0;
    const Collected host = run_alone(gpu, so, with_logprobs);
    EXPECT_EQ(host.ids, alone.back().ids) << "device argmax vs the host's pick from the same logits";
    for (size_t t = 0; t < host.ids.size(); ++t) same_pick += host.ids[t] == alone.back().ids[t], ++picks;
  }
  // Together: all twelve at once.
  Scheduler s(gpu, so);
  std::vector<Collected> together(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) s.submit(specs[i], std::make_shared<Collector>(together[i]));
  while (s.step_once()) {
  }
  int64_t agree = 0, total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_EQ(together[i].ids.size(), alone[i].ids.size());
    for (size_t t = 0; t < alone[i].ids.size(); ++t) agree += together[i].ids[t] == alone[i].ids[t], ++total;
  }
  std::printf("[ serving ] device vs host greedy picks: %lld / %lld equal; 12 concurrent vs alone: %lld / %lld greedy tokens equal\n",
              static_cast<long long>(same_pick), static_cast<long long>(picks), static_cast<long long>(agree),
              static_cast<long long>(total));
  EXPECT_GT(agree, total / 2);
  EXPECT_EQ(gpu.live_sequences(), 0);
}

// Sampling on the device: parameters that leave one candidate give the greedy tokens, a seed gives
// the same tokens again, and greedy penalties give the host's tokens from the same logits.
TEST(CudaServing, DeviceSamplingFollowsItsParameters) {
  K3_REQUIRE_GPU();
  const k3::test::TinyCheckpoint ckpt =
      k3::test::make_tiny_pinned_routing(FamilyId::Bf16, TinyArch::KimiK3, 11, TinySize::Small);
  Engine gpu(ckpt.dir, serving_options());
  ASSERT_TRUE(gpu.samples_on_device());
  const int64_t vocab = gpu.config().vocab_size;
  SchedulerOptions so;
  so.prefix_cache = false;
  const RequestSpec base = request(k3::test::test_prompt(40, vocab, 7), 10, -1);
  const Collected greedy = run_alone(gpu, so, base);
  auto sampled = [&](auto edit) {
    RequestSpec spec = base;
    spec.sampling.greedy = false;
    spec.sampling.temperature = 1.0;
    spec.sampling.seed = 5;
    edit(spec.sampling);
    return run_alone(gpu, so, spec).ids;
  };
  EXPECT_EQ(sampled([](SamplingParams& p) { p.top_k = 1; }), greedy.ids);
  EXPECT_EQ(sampled([](SamplingParams& p) { p.top_p = 1e-6; }), greedy.ids);
  EXPECT_EQ(sampled([](SamplingParams& p) { p.min_p = 1.0; }), greedy.ids);
  const std::vector<int64_t> a = sampled([](SamplingParams&) {}), b = sampled([](SamplingParams&) {});
  const std::vector<int64_t> c = sampled([](SamplingParams& p) { p.seed = 6; });
  const std::vector<int64_t> hot = sampled([](SamplingParams& p) { p.temperature = 2.0; });
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::printf("[ serving ] device sampling, seed 5: %zu tokens, %zu differ from greedy; seed 6 differs at %zu\n", a.size(),
              static_cast<size_t>(std::inner_product(a.begin(), a.end(), greedy.ids.begin(), 0, std::plus<>(), std::not_equal_to<>())),
              static_cast<size_t>(std::mismatch(a.begin(), a.end(), c.begin()).first - a.begin()));
  EXPECT_EQ(hot.size(), greedy.ids.size());
  // Greedy with penalties: on the device (no logprobs) and on the host (logprobs ask for logits).
  RequestSpec penalized = base;
  penalized.sampling.frequency_penalty = 1.5;
  penalized.sampling.presence_penalty = 0.5;
  const Collected device = run_alone(gpu, so, penalized);
  penalized.top_logprobs = 0;
  const Collected host = run_alone(gpu, so, penalized);
  EXPECT_EQ(device.ids, host.ids);
}

}  // namespace
}  // namespace k3::cuda
