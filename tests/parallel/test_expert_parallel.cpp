// Expert parallelism on the CPU backend over in-process ranks (backend/cpu/expert_parallel.h): for
// make-tiny checkpoints of both architectures and 2, 3, 4 and 8 ranks, one Engine per rank making
// the same calls gives logits equal bit for bit to the one-rank engine (prefill of several
// sequences, then batched decode), and generate() gives the same tokens.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "model/engine_test_util.h"
#include "parallel/sharding.h"
#include "parallel/thread_world.h"
#include "runtime/generate.h"

namespace k3 {
namespace {

struct EngineRun {
  std::vector<std::vector<float>> logits;  // per step
  std::vector<int64_t> generated;
};

// Two sequences prefilled together, three batched decode steps, then a sampled generation.
EngineRun run_engine(const std::string& dir, Communicator* expert_ranks, int expert_parallel = 1) {
  EngineOptions o;
  o.threads = expert_ranks ? 1 : 2;
  o.expert_parallel = expert_parallel;
  o.max_sequences = 4;
  o.max_context = 256;
  o.expert_ranks = expert_ranks;
  Engine e(dir, o);
  const int64_t vocab = e.config().vocab_size;
  EngineRun r;
  const int64_t a = e.new_sequence(), b = e.new_sequence();
  std::vector<StepResult> out = e.step({{a, test::test_prompt(37, vocab, 1), true}, {b, test::test_prompt(12, vocab, 2), true}});
  for (int step = 0; step < 4; ++step) {
    for (const StepResult& s : out) r.logits.push_back(s.logits);
    if (step == 3) break;
    out = e.step({{a, {(step * 7 + 3) % vocab}}, {b, {(step * 11 + 5) % vocab}}});
  }
  e.free_sequence(a);
  e.free_sequence(b);
  GenerateOptions g;
  g.max_tokens = 8;
  g.stop_at_eos = false;
  g.sampling.greedy = false;
  g.sampling.seed = 5;
  r.generated = generate(e, test::test_prompt(20, vocab, 3), g).ids;
  return r;
}

class ExpertParallel : public ::testing::TestWithParam<TinyArch> {};

TEST_P(ExpertParallel, EveryRankCountGivesTheOneRankLogitsBitForBit) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, GetParam(), 21);
  const EngineRun alone = run_engine(tiny.dir, nullptr);
  ASSERT_FALSE(alone.logits.empty());
  for (int ranks : {2, 3, 4, 8}) {
    std::vector<EngineRun> runs(static_cast<size_t>(ranks));
    ThreadWorld world(ranks);
    world.run([&](Communicator& comm) { runs[static_cast<size_t>(comm.rank())] = run_engine(tiny.dir, &comm); });
    for (int q = 0; q < ranks; ++q) {
      const EngineRun& got = runs[static_cast<size_t>(q)];
      ASSERT_EQ(got.logits.size(), alone.logits.size());
      for (size_t s = 0; s < alone.logits.size(); ++s) {
        ASSERT_EQ(got.logits[s].size(), alone.logits[s].size());
        EXPECT_EQ(std::memcmp(got.logits[s].data(), alone.logits[s].data(), alone.logits[s].size() * sizeof(float)), 0)
            << ranks << " ranks, rank " << q << ", output " << s << ": relative error "
            << test::relative_max_error(got.logits[s], alone.logits[s]);
      }
      EXPECT_EQ(got.generated, alone.generated) << ranks << " ranks, rank " << q;
    }
  }
}

// The same ranks behind one Engine (EngineOptions::expert_parallel), as the CLI and the server run them.
TEST_P(ExpertParallel, OneEngineOverInProcessRanksGivesTheOneRankLogitsBitForBit) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, GetParam(), 23);
  const EngineRun alone = run_engine(tiny.dir, nullptr);
  for (int ranks : {2, 5}) {
    const EngineRun got = run_engine(tiny.dir, nullptr, ranks);
    ASSERT_EQ(got.logits.size(), alone.logits.size());
    for (size_t s = 0; s < alone.logits.size(); ++s) {
      EXPECT_EQ(got.logits[s], alone.logits[s]) << ranks << " ranks, output " << s;
    }
    EXPECT_EQ(got.generated, alone.generated) << ranks << " ranks";
  }
}

INSTANTIATE_TEST_SUITE_P(BothArchitectures, ExpertParallel, ::testing::Values(TinyArch::KimiK3, TinyArch::KimiLinear),
                         [](const auto& info) { return info.param == TinyArch::KimiK3 ? "KimiK3" : "KimiLinear"; });

TEST(ExpertRanges, PartitionEveryExpertInOrder) {
  for (int64_t experts = 1; experts <= 20; ++experts) {
    for (int64_t ranks = 1; ranks <= 9; ++ranks) {
      int64_t next = 0;
      for (int64_t r = 0; r < ranks; ++r) {
        const ExpertRange range = expert_range(experts, ranks, r);
        EXPECT_EQ(range.first, next);
        EXPECT_LE(range.count, (experts + ranks - 1) / ranks);
        EXPECT_GE(range.count, experts / ranks);
        for (int64_t e = range.first; e < range.first + range.count; ++e) EXPECT_EQ(expert_owner(e, experts, ranks), r);
        next += range.count;
      }
      EXPECT_EQ(next, experts);
    }
  }
}

// The field an Engine's refusal of `o` names ("accepted" when it does not refuse).
std::string refused_field(const std::string& dir, const EngineOptions& o) {
  try {
    Engine e(dir, o);
    return "accepted";
  } catch (const Error& err) {
    return err.where().field;
  }
}

TEST(ExpertParallelOptions, OutOfRangeOrWithADeviceExecutorIsRefused) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, TinyArch::KimiK3, 22);
  const ExecutorFactory device = [](const K3Config&, const LoadPlan&, PlanFiles&) -> std::unique_ptr<Executor> { return nullptr; };
  for (int ranks : {0, -1, kMaxExpertParallel + 1}) {
    EngineOptions o;
    o.expert_parallel = ranks;
    EXPECT_EQ(refused_field(tiny.dir, o), "expert_parallel") << ranks;
  }
  EngineOptions o;
  o.expert_parallel = 2;
  o.executor = device;
  EXPECT_EQ(refused_field(tiny.dir, o), "expert_parallel");
  ThreadWorld world(1);
  world.run([&](Communicator& comm) {
    EngineOptions ranked;
    ranked.expert_ranks = &comm;
    ranked.executor = device;
    EXPECT_EQ(refused_field(tiny.dir, ranked), "expert_ranks");
  });
}

}  // namespace
}  // namespace k3
