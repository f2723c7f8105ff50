// Constrained decoding in the serving loop (runtime/token_constraint.h): every sampled token of a
// constrained request is one its constraint allowed, the constraint sees each generated token once
// (also across a preemption, whose replay samples nothing), unconstrained requests in the same
// steps are unchanged, and a constraint that allows everything changes nothing.
#include <gtest/gtest.h>

#include "model/engine_test_util.h"
#include "runtime/collecting_sink.h"
#include "runtime/generate.h"
#include "runtime/scheduler.h"

namespace k3 {
namespace {

using test::Collected;
using test::Collector;

// Allows the ids ≡ n (mod `modulus`) for the n-th generated token (modulus 1: every id); records
// what it was told.
class ModularConstraint final : public TokenConstraint {
 public:
  ModularConstraint(int64_t vocab, int64_t modulus) : vocab_(vocab), modulus_(modulus) {}
  void allowed_tokens(std::span<uint32_t> allowed, int64_t) override {
    ++masks;
    const int64_t want = static_cast<int64_t>(accepted.size()) % modulus_;
    for (int64_t id = 0; id < vocab_; ++id) {
      if (id % modulus_ == want) allowed[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
    }
  }
  void accept(int64_t id) override { accepted.push_back(id); }
  bool allows(size_t n, int64_t id) const { return id % modulus_ == static_cast<int64_t>(n) % modulus_; }

  std::vector<int64_t> accepted;
  int64_t masks = 0;

 private:
  int64_t vocab_, modulus_;
};

class ConstrainedDecoding : public ::testing::Test {
 protected:
  void SetUp() override { tiny_ = test::make_tiny_conditioned(FamilyId::Bf16, TinyArch::KimiK3, 11); }
  std::unique_ptr<Engine> engine(int64_t kv_blocks = 0) {
    EngineOptions o;
    o.max_sequences = 16;
    o.kv_blocks = kv_blocks;
    o.max_context = 1024;
    return std::make_unique<Engine>(tiny_.dir, o);
  }
  static RequestSpec spec(std::vector<int64_t> prompt, int64_t max_tokens, std::shared_ptr<TokenConstraint> c,
                          bool sample = false) {
    RequestSpec s;
    s.prompt = std::move(prompt);
    s.max_tokens = max_tokens;
    s.constraint = std::move(c);
    if (sample) {
      s.sampling.greedy = false;
      s.sampling.temperature = 1.5;
      s.sampling.seed = 7;
    }
    return s;
  }
  static void run_to_idle(Scheduler& s) {
    for (int i = 0; i < 100000 && s.step_once(); ++i) {
    }
  }
  test::TinyCheckpoint tiny_;
};

TEST_F(ConstrainedDecoding, EveryTokenIsAllowedAndOthersAreUnchanged) {
  auto e = engine();
  const int64_t vocab = e->config().vocab_size;
  constexpr int kRequests = 4;
  std::vector<std::shared_ptr<ModularConstraint>> constraints;
  std::vector<Collected> got(kRequests);
  std::vector<std::vector<int64_t>> alone;
  Scheduler s(*e, SchedulerOptions{});
  for (int i = 0; i < kRequests; ++i) {
    const std::vector<int64_t> prompt = test::test_prompt(20 + 31 * i, vocab, i);
    std::shared_ptr<ModularConstraint> c;
    if (i % 2 == 0) {
      c = std::make_shared<ModularConstraint>(vocab, 3);
    } else {
      GenerateOptions g;
      g.max_tokens = 12;
      g.stop_at_eos = false;
      alone.push_back(generate(*e, prompt, g).ids);
    }
    constraints.push_back(c);
    s.submit(spec(prompt, 12, c, i == 2), std::make_shared<Collector>(got[static_cast<size_t>(i)]));
  }
  run_to_idle(s);
  for (int i = 0; i < kRequests; ++i) {
    const Collected& g = got[static_cast<size_t>(i)];
    ASSERT_EQ(g.ids.size(), 12u) << "request " << i;
    if (i % 2 == 1) {
      EXPECT_EQ(g.ids, alone[static_cast<size_t>(i / 2)]) << "unconstrained request " << i;
      continue;
    }
    const ModularConstraint& c = *constraints[static_cast<size_t>(i)];
    EXPECT_EQ(c.accepted, g.ids) << "request " << i;
    EXPECT_EQ(c.masks, 12) << "one mask per sampled token";
    for (size_t n = 0; n < g.ids.size(); ++n) EXPECT_TRUE(c.allows(n, g.ids[n])) << "request " << i << " token " << n;
  }
}

TEST_F(ConstrainedDecoding, AConstraintAllowingEverythingChangesNothing) {
  auto e = engine();
  const int64_t vocab = e->config().vocab_size;
  const std::vector<int64_t> prompt = test::test_prompt(77, vocab, 3);
  Collected free_run, all_allowed;
  Scheduler s(*e, SchedulerOptions{});
  s.submit(spec(prompt, 16, nullptr), std::make_shared<Collector>(free_run));
  s.submit(spec(prompt, 16, std::make_shared<ModularConstraint>(vocab, 1)), std::make_shared<Collector>(all_allowed));
  run_to_idle(s);
  EXPECT_EQ(all_allowed.ids, free_run.ids);
}

// generate() applies a constraint as the serving loop does: the same greedy tokens.
TEST_F(ConstrainedDecoding, GenerateAgreesWithTheServingLoop) {
  auto e = engine();
  const int64_t vocab = e->config().vocab_size;
  const std::vector<int64_t> prompt = test::test_prompt(50, vocab, 9);
  GenerateOptions g;
  g.max_tokens = 10;
  g.stop_at_eos = false;
  auto alone = std::make_shared<ModularConstraint>(vocab, 4);
  g.constraint = alone;
  const std::vector<int64_t> ids = generate(*e, prompt, g).ids;
  Collected served;
  auto c = std::make_shared<ModularConstraint>(vocab, 4);
  Scheduler s(*e, SchedulerOptions{});
  s.submit(spec(prompt, 10, c), std::make_shared<Collector>(served));
  run_to_idle(s);
  EXPECT_EQ(ids, served.ids);
  EXPECT_EQ(alone->accepted, ids);
  EXPECT_EQ(alone->masks, 10);
  for (size_t n = 0; n < ids.size(); ++n) EXPECT_TRUE(alone->allows(n, ids[n]));
}

TEST_F(ConstrainedDecoding, PreemptionReplaysWithoutAskingTheConstraintAgain) {
  const int64_t vocab = engine()->config().vocab_size;
  std::vector<std::vector<int64_t>> want;
  for (int64_t blocks : {int64_t{0}, int64_t{4}}) {  // 4: every request crosses into a second block
    auto e = engine(blocks);
    SchedulerOptions so;
    so.prefix_cache = false;
    Scheduler s(*e, so);
    std::vector<Collected> got(4);
    std::vector<std::shared_ptr<ModularConstraint>> cs;
    for (int i = 0; i < 4; ++i) {
      cs.push_back(std::make_shared<ModularConstraint>(vocab, 2));
      s.submit(spec(test::test_prompt(40 + 5 * i, vocab, i), 30, cs.back()), std::make_shared<Collector>(got[static_cast<size_t>(i)]));
    }
    run_to_idle(s);
    if (blocks > 0) EXPECT_GT(s.stats().preemptions, 0);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(cs[static_cast<size_t>(i)]->accepted, got[static_cast<size_t>(i)].ids) << "request " << i;
      if (blocks == 0) want.push_back(got[static_cast<size_t>(i)].ids);
      else EXPECT_EQ(got[static_cast<size_t>(i)].ids, want[static_cast<size_t>(i)]) << "request " << i;
    }
  }
}

}  // namespace
}  // namespace k3
