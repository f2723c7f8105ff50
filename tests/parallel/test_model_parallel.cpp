// Tensor and expert parallelism on the CPU backend over in-process ranks
// (backend/cpu/tensor_parallel.h, expert_parallel.h): for make-tiny checkpoints of both
// architectures, one Engine per rank making the same calls (2, 3, 4 and 8 ranks), or one Engine over
// in-process ranks (runtime/parallel_executor.h: TP, EP and TP×EP layouts), gives logits equal bit
// for bit to the one-rank engine (prefill of several sequences, then batched decode), and generate()
// gives the same tokens, sampled and greedy (the greedy picks by the vocabulary-split argmax).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>

#include "backend/cpu/tensor_parallel.h"
#include "collective_checks.h"
#include "core/error.h"
#include "model/engine_test_util.h"
#include "parallel/group_communicator.h"
#include "parallel/sharding.h"
#include "parallel/thread_world.h"
#include "runtime/generate.h"
#include "runtime/rank_calls.h"

namespace k3 {
namespace {

struct EngineRun {
  std::vector<std::vector<float>> logits;  // per step
  std::vector<int64_t> generated, greedy;
};

// Two sequences prefilled together, three batched decode steps, then a sampled and a greedy
// generation. `ranks`: this engine is one rank of a world; `layout`: the engine runs its own ranks.
EngineRun run_engine(const std::string& dir, ParallelRanks ranks = {}, ParallelLayout layout = {},
                     std::optional<EngineOptions> options = std::nullopt) {
  EngineOptions o = options.value_or(EngineOptions{});
  if (!options) o.threads = ranks.tensor || ranks.experts ? 1 : 2;
  o.tensor_parallel = layout.tensor;
  o.expert_parallel = layout.experts;
  o.max_sequences = 4;
  o.max_context = 256;
  o.ranks = ranks;
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
  g.sampling.greedy = true;
  r.greedy = generate(e, test::test_prompt(9, vocab, 4), g).ids;
  return r;
}

// `got` equals `alone`: logits bit for bit, the same tokens.
void expect_same_run(const EngineRun& got, const EngineRun& alone, const std::string& what) {
  ASSERT_EQ(got.logits.size(), alone.logits.size()) << what;
  for (size_t s = 0; s < alone.logits.size(); ++s) {
    ASSERT_EQ(got.logits[s].size(), alone.logits[s].size()) << what;
    EXPECT_EQ(std::memcmp(got.logits[s].data(), alone.logits[s].data(), alone.logits[s].size() * sizeof(float)), 0)
        << what << ", output " << s << ": relative error " << test::relative_max_error(got.logits[s], alone.logits[s]);
  }
  EXPECT_EQ(got.generated, alone.generated) << what;
  EXPECT_EQ(got.greedy, alone.greedy) << what;
}

// One Engine per rank of a ThreadWorld of `world` ranks, each given `ranks_of(rank)`; every rank's run.
std::vector<EngineRun> run_ranks(const std::string& dir, int world, const std::function<ParallelRanks(Communicator&)>& ranks_of) {
  std::vector<EngineRun> runs(static_cast<size_t>(world));
  ThreadWorld threads(world);
  threads.run([&](Communicator& comm) { runs[static_cast<size_t>(comm.rank())] = run_engine(dir, ranks_of(comm)); });
  return runs;
}

class ExpertParallel : public ::testing::TestWithParam<TinyArch> {};

TEST_P(ExpertParallel, EveryRankCountGivesTheOneRankLogitsBitForBit) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, GetParam(), 21);
  const EngineRun alone = run_engine(tiny.dir);
  ASSERT_FALSE(alone.logits.empty());
  for (int ranks : {2, 3, 4, 8}) {
    const std::vector<EngineRun> runs = run_ranks(tiny.dir, ranks, [](Communicator& c) { return ParallelRanks{nullptr, &c}; });
    for (int q = 0; q < ranks; ++q) expect_same_run(runs[q], alone, std::to_string(ranks) + " ranks, rank " + std::to_string(q));
  }
}

// The same ranks behind one Engine (EngineOptions::expert_parallel), as the CLI and the server run them.
TEST_P(ExpertParallel, OneEngineOverInProcessRanksGivesTheOneRankLogitsBitForBit) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, GetParam(), 23);
  const EngineRun alone = run_engine(tiny.dir);
  for (int ranks : {2, 5}) expect_same_run(run_engine(tiny.dir, {}, {1, ranks}), alone, std::to_string(ranks) + " ranks");
}

class TensorParallel : public ::testing::TestWithParam<TinyArch> {};

// 3 ranks split the 4 heads, the channels and the vocabulary unevenly; 8 ranks leave four of them
// without heads.
TEST_P(TensorParallel, EveryRankCountGivesTheOneRankLogitsBitForBit) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, GetParam(), 24);
  const EngineRun alone = run_engine(tiny.dir);
  for (int ranks : {2, 3, 4, 8}) {
    const std::vector<EngineRun> runs = run_ranks(tiny.dir, ranks, [](Communicator& c) { return ParallelRanks{&c, nullptr}; });
    for (int q = 0; q < ranks; ++q) expect_same_run(runs[q], alone, std::to_string(ranks) + " ranks, rank " + std::to_string(q));
  }
}

// Tensor parallelism within groups, expert parallelism over the whole world (groups of 2 in a world
// of 4: GroupCommunicator), and both over the same ranks.
TEST_P(TensorParallel, TimesExpertParallelGivesTheOneRankLogitsBitForBit) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, GetParam(), 25);
  const EngineRun alone = run_engine(tiny.dir);
  for (const ParallelLayout layout : {ParallelLayout{2, 4}, ParallelLayout{4, 4}, ParallelLayout{2, 8}, ParallelLayout{2, 1},
                                      ParallelLayout{8, 1}}) {
    expect_same_run(run_engine(tiny.dir, {}, layout), alone,
                    "TP " + std::to_string(layout.tensor) + " × EP " + std::to_string(layout.experts));
  }
}

// One engine over ranks that are not its own threads (runtime/rank_calls.h, as `mpirun -np N k3 …`
// runs): rank 0's engine over a leader executor, the other ranks following its calls. TP 2 × EP 4
// over four ranks gives the one-rank logits bit for bit.
TEST_P(TensorParallel, LeaderAndFollowersGiveTheOneRankLogitsBitForBit) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, GetParam(), 28);
  const EngineRun alone = run_engine(tiny.dir);
  ThreadWorld world(4);
  EngineRun led;
  world.run([&](Communicator& c) {
    GroupCommunicator group(c, 2);
    const ParallelRanks ranks{&group, &c};
    const CpuCacheOptions caches{4, 0, 0, 256};
    if (c.rank() == 0) {
      EngineOptions o;
      o.threads = 1;
      o.max_sequences = 4;
      o.max_context = 256;
      o.executor = [&](const K3Config& config, const LoadPlan& plan, PlanFiles& files) {
        agree_on_model(c, model_fingerprint(config, plan, "TP 2 × EP 4"));
        return make_leader_executor(make_cpu_executor(config, plan, files, {}, caches, ranks), c);
      };
      led = run_engine(tiny.dir, {}, {}, o);
      return;
    }
    const LoadPlan plan = plan_checkpoint(tiny.dir);
    PlanFiles files(plan);
    const K3Config config = *open_checkpoint_dir(tiny.dir).config;
    agree_on_model(c, model_fingerprint(config, plan, "TP 2 × EP 4"));
    const std::unique_ptr<Executor> local = make_cpu_executor(config, plan, files, {}, caches, ranks);
    follow_calls(*local, c);
  });
  expect_same_run(led, alone, "leader and followers");
}

// Ranks about to load different models (here: different flags) fail together, naming the ranks.
TEST(RankCalls, RanksThatWouldLoadDifferentModelsFailTogether) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, TinyArch::KimiK3, 29);
  const LoadPlan plan = plan_checkpoint(tiny.dir);
  const K3Config config = *open_checkpoint_dir(tiny.dir).config;
  ThreadWorld world(3);
  std::vector<std::string> errors(3);
  world.run([&](Communicator& c) {
    try {
      agree_on_model(c, model_fingerprint(config, plan, c.rank() == 2 ? "activations bf16" : "activations weight-only"));
    } catch (const Error& e) {
      errors[static_cast<size_t>(c.rank())] = e.what();
    }
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("rank(s) 2 would load a different model, plan or layout than rank 0"), std::string::npos) << e;
  }
}

INSTANTIATE_TEST_SUITE_P(BothArchitectures, TensorParallel, ::testing::Values(TinyArch::KimiK3, TinyArch::KimiLinear),
                         [](const auto& info) { return info.param == TinyArch::KimiK3 ? "KimiK3" : "KimiLinear"; });

// Row views of every quantized format's kernels (rows that start inside a kernel's row group, 3
// ranks) give the one-rank bits, under TP × EP.
class TensorParallelFamilies : public ::testing::TestWithParam<FamilyId> {};

TEST_P(TensorParallelFamilies, GiveTheOneRankLogitsBitForBit) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(GetParam(), TinyArch::KimiK3, 26);
  const EngineRun alone = run_engine(tiny.dir);
  expect_same_run(run_engine(tiny.dir, {}, {3, 3}), alone, "TP 3 × EP 3");
}

INSTANTIATE_TEST_SUITE_P(QuantizedFamilies, TensorParallelFamilies,
                         ::testing::Values(FamilyId::ModelOptMixed, FamilyId::ModelOptNvfp4, FamilyId::CompressedTensorsMxfp4,
                                           FamilyId::Fp8Block, FamilyId::ModelSlimW4A8, FamilyId::GgufExpertPack),
                         [](const auto& info) {
                           std::string name = family_name(info.param);
                           std::erase(name, '-');
                           return name;
                         });

// Collectives of tensor-parallel groups inside a larger world match their serial definitions.
TEST(GroupCommunicator, CollectivesMatchTheirSerialDefinitions) {
  for (const std::pair<int, int> sizes : {std::pair{4, 2}, std::pair{8, 4}, std::pair{6, 3}, std::pair{4, 4}, std::pair{3, 1}}) {
    const int world_size = sizes.first, group = sizes.second;  // named: the lambda below captures them
    ThreadWorld world(world_size);
    world.run([&](Communicator& c) {
      GroupCommunicator g(c, group);
      EXPECT_EQ(g.size(), group);
      EXPECT_EQ(g.rank(), c.rank() % group);
      for (const std::string& f : test::collective_failures(g)) ADD_FAILURE() << world_size << "/" << group << ": " << f;
    });
  }
}

TEST(GroupCommunicator, AGroupSizeThatDoesNotDivideTheWorldIsRefused) {
  ThreadWorld world(4);
  world.run([&](Communicator& c) { EXPECT_THROW(GroupCommunicator(c, 3), Error); });
}

// The vocabulary-split argmax follows argmax_rows: the largest value, the lowest id on ties (also
// across ranks), −1 for a row with a NaN or an infinity on any rank; ranks without columns (more
// ranks than ids) take part.
TEST(VocabularySplit, ArgmaxMatchesTheWholeRowsArgmax) {
  const int64_t vocab = 7;
  Tensor whole(5, vocab);
  const float rows[5][7] = {{1, 2, 3, 9, 0, 9, 1}, {5, 5, 5, 5, 5, 5, 5}, {0, 1, 2, 3, 4, 5, NAN},
                            {-3, -2, -1, -4, -5, INFINITY, 0}, {0, 0, 0, 0, 0, 0, 8}};
  for (int64_t r = 0; r < 5; ++r) std::copy_n(rows[r], vocab, whole.row(r));
  const std::vector<int64_t> want = argmax_rows(whole);
  for (int ranks : {1, 2, 3, 4, 7, 8}) {
    ThreadWorld world(ranks);
    world.run([&](Communicator& c) {
      const IndexRange mine = split_range(vocab, ranks, c.rank());
      Tensor local(whole.rows, mine.count);
      for (int64_t r = 0; r < whole.rows; ++r) std::copy_n(whole.row(r) + mine.first, mine.count, local.row(r));
      EXPECT_EQ(cpu::argmax_vocab_split(c, local, vocab), want) << ranks << " ranks";
      const Tensor gathered = cpu::gather_columns(c, local, vocab);
      EXPECT_EQ(std::memcmp(gathered.data.data(), whole.data.data(), whole.data.size() * sizeof(float)), 0) << ranks << " ranks";
    });
  }
}

INSTANTIATE_TEST_SUITE_P(BothArchitectures, ExpertParallel, ::testing::Values(TinyArch::KimiK3, TinyArch::KimiLinear),
                         [](const auto& info) { return info.param == TinyArch::KimiK3 ? "KimiK3" : "KimiLinear"; });

TEST(IndexRanges, PartitionEveryExpertInOrder) {
  for (int64_t experts = 1; experts <= 20; ++experts) {
    for (int64_t ranks = 1; ranks <= 9; ++ranks) {
      int64_t next = 0;
      for (int64_t r = 0; r < ranks; ++r) {
        const IndexRange range = split_range(experts, ranks, r);
        EXPECT_EQ(range.first, next);
        EXPECT_LE(range.count, (experts + ranks - 1) / ranks);
        EXPECT_GE(range.count, experts / ranks);
        for (int64_t e = range.first; e < range.first + range.count; ++e) EXPECT_EQ(split_owner(e, experts, ranks), r);
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

TEST(ParallelOptions, OutOfRangeNotTpWithinEpOrWithADeviceExecutorIsRefused) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, TinyArch::KimiK3, 22);
  const ExecutorFactory device = [](const K3Config&, const LoadPlan&, PlanFiles&) -> std::unique_ptr<Executor> { return nullptr; };
  for (const bool tensor : {true, false}) {
    const std::string field = tensor ? "tensor_parallel" : "expert_parallel";
    for (int ranks : {0, -1, kMaxParallelRanks + 1, 2}) {
      EngineOptions o;
      (tensor ? o.tensor_parallel : o.expert_parallel) = ranks;
      if (ranks == 2) o.executor = device;
      EXPECT_EQ(refused_field(tiny.dir, o), field) << ranks;
    }
  }
  for (const ParallelLayout layout : {ParallelLayout{2, 3}, ParallelLayout{4, 2}}) {
    EngineOptions o;
    o.tensor_parallel = layout.tensor;
    o.expert_parallel = layout.experts;
    EXPECT_EQ(refused_field(tiny.dir, o), "expert_parallel") << layout.tensor << " × " << layout.experts;
  }
  ThreadWorld world(1);
  world.run([&](Communicator& comm) {
    EngineOptions ranked;
    ranked.ranks.experts = &comm;
    ranked.executor = device;
    EXPECT_EQ(refused_field(tiny.dir, ranked), "ranks");
  });
}

}  // namespace
}  // namespace k3
