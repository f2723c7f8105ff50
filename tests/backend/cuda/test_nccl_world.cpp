// GPU ranks over NCCL (parallel/nccl/nccl_world.h), on the GPUs of this process: every collective
// against its serial definition with one rank per GPU (world size 1 on a one-GPU machine), the CPU
// backend's tensor- and expert-parallel path over an NCCL world of one rank giving the one-rank
// logits bit for bit, and, with two GPUs or more, a rank that stops calling failing the others
// within the timeout. Skipped without a GPU or in builds without NCCL.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#ifdef K3_HAVE_NCCL
#include <cstring>

#include "model/engine_test_util.h"
#include "parallel/collective_checks.h"
#include "parallel/nccl/nccl_world.h"
#include "parallel/thread_world.h"

namespace k3 {
namespace {

int gpu_count() { return static_cast<int>(cuda::list_devices().size()); }

TEST(NcclWorld, CollectivesMatchTheirSerialDefinitionsOnEveryGpu) {
  K3_REQUIRE_GPU();
  for (int n = 1; n <= gpu_count(); n *= 2) {
    ThreadWorld bootstrap(n);
    bootstrap.run([&](Communicator& c) {
      NcclWorld nccl(c, c.rank());
      for (const std::string& f : test::collective_failures(nccl)) ADD_FAILURE() << n << " GPUs: " << f;
    });
  }
}

// Logits of a prefill of two sequences and two batched decode steps.
std::vector<std::vector<float>> logits_of(const std::string& dir, ParallelRanks ranks) {
  EngineOptions o;
  o.threads = 2;
  o.max_sequences = 4;
  o.max_context = 256;
  o.ranks = ranks;
  Engine e(dir, o);
  const int64_t vocab = e.config().vocab_size;
  const int64_t a = e.new_sequence(), b = e.new_sequence();
  std::vector<std::vector<float>> out;
  std::vector<StepResult> step = e.step({{a, test::test_prompt(19, vocab, 1), true}, {b, test::test_prompt(6, vocab, 2), true}});
  for (int i = 0; i < 3; ++i) {
    for (const StepResult& s : step) out.push_back(s.logits);
    if (i < 2) step = e.step({{a, {(i * 5 + 1) % vocab}}, {b, {(i * 3 + 2) % vocab}}});
  }
  return out;
}

TEST(NcclWorld, TheParallelPathOverOneGpuRankGivesTheOneRankLogits) {
  K3_REQUIRE_GPU();
  for (TinyArch arch : {TinyArch::KimiK3, TinyArch::KimiLinear}) {
    const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, arch, 41);
    const auto alone = logits_of(tiny.dir, {});
    ThreadWorld bootstrap(1);
    bootstrap.run([&](Communicator& c) {
      NcclWorld nccl(c, 0);
      const auto got = logits_of(tiny.dir, {&nccl, &nccl});
      ASSERT_EQ(got.size(), alone.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(std::memcmp(got[i].data(), alone[i].data(), alone[i].size() * sizeof(float)), 0) << "output " << i;
      }
    });
  }
}

TEST(NcclWorld, ARankThatStopsCallingFailsTheOthersWithinTheTimeout) {
  K3_REQUIRE_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "needs two GPUs";
  ThreadWorld bootstrap(2);
  std::string error;
  bootstrap.run([&](Communicator& c) {
    NcclWorld nccl(c, c.rank(), std::chrono::milliseconds(1000));
    if (c.rank() == 1) return;  // stops calling
    std::vector<float> v(8, 1.0f);
    try {
      nccl.all_reduce(v, ReduceOp::kSum);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  EXPECT_NE(error.find("rank 0 waited 1000 ms for the other ranks in all_gather"), std::string::npos) << error;
}

}  // namespace
}  // namespace k3
#else
TEST(NcclWorld, NeedsNccl) { GTEST_SKIP() << "built without NCCL"; }
#endif
