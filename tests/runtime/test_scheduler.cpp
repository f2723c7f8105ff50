// The serving loop (runtime/scheduler.h) on make-tiny checkpoints of both architectures:
//   - batch invariance: 32 concurrent greedy requests give exactly their single generate() runs;
//   - an exact prefix cache: a request resumed from cached blocks (and a KDA snapshot) produces the
//     logprobs it produces without the cache, bit for bit (every logprob depends on every logit);
//   - preemption by recompute under a small cache changes no output;
//   - cancellation, stop tokens, queue limits, and every count back to zero when idle.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <cstring>

#include "error_of.h"
#include "model/engine_test_util.h"
#include "runtime/collecting_sink.h"
#include "chat/k3_format.h"
#include "runtime/generate.h"
#include "tokenizer/tiny_vocab.h"
#include "tokenizer/tokenizer.h"

namespace k3 {
namespace {

using test::Collected;
using test::Collector;

RequestSpec greedy(std::vector<int64_t> prompt, int64_t max_tokens, int top_logprobs = -1) {
  RequestSpec s;
  s.prompt = std::move(prompt);
  s.max_tokens = max_tokens;
  s.top_logprobs = top_logprobs;
  return s;
}

void run_to_idle(Scheduler& s) {
  for (int i = 0; i < 100000 && s.step_once(); ++i) {
  }
}

bool same_logprobs(const std::vector<TokenLogprobs>& a, const std::vector<TokenLogprobs>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || std::memcmp(&a[i].logprob, &b[i].logprob, sizeof(float)) != 0 || a[i].top != b[i].top) return false;
  }
  return true;
}

class SchedulerTest : public ::testing::TestWithParam<std::tuple<FamilyId, TinyArch>> {
 protected:
  void SetUp() override {
    tiny_ = test::make_tiny_conditioned(std::get<0>(GetParam()), std::get<1>(GetParam()), 11);
  }
  std::unique_ptr<Engine> engine(int64_t kv_blocks = 0) {
    EngineOptions o;
    o.max_sequences = 64;
    o.kv_blocks = kv_blocks;
    o.max_context = 1024;
    return std::make_unique<Engine>(tiny_.dir, o);
  }
  test::TinyCheckpoint tiny_;
};

// Prompts of lengths around the 64-token block and chunk edges.
std::vector<std::vector<int64_t>> prompts(int64_t count, int64_t vocab) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(test::test_prompt(1 + (i * 37) % 190, vocab, i));
  return out;
}

TEST_P(SchedulerTest, ConcurrentGreedyRequestsEqualTheirSingleRuns) {
  auto e = engine();
  const auto ps = prompts(32, e->config().vocab_size);
  std::vector<std::vector<int64_t>> alone;
  for (const auto& p : ps) {
    GenerateOptions g;
    g.max_tokens = 6;
    g.stop_at_eos = false;
    alone.push_back(generate(*e, p, g).ids);
  }
  SchedulerOptions so;
  so.max_batch_tokens = 96;  // prompts are cut into pieces and mixed with decode tokens
  so.prefix_cache = false;
  Scheduler s(*e, so);
  std::vector<Collected> got(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) s.submit(greedy(ps[i], 6), std::make_shared<Collector>(got[i]));
  run_to_idle(s);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(got[i].ids, alone[i]) << "request " << i << " (prompt of " << ps[i].size() << " tokens)";
    EXPECT_EQ(got[i].finish, FinishReason::kLength);
  }
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
  EXPECT_EQ(st.state_slots_used, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(e->live_sequences(), 0);
}

TEST_P(SchedulerTest, PrefixHitGivesTheSameLogprobsAsAMiss) {
  auto e = engine();
  const int64_t vocab = e->config().vocab_size;
  const std::vector<int64_t> system = test::test_prompt(200, vocab, 1);
  std::vector<int64_t> a = system, b = system;
  for (int64_t t : test::test_prompt(30, vocab, 2)) a.push_back(t);
  for (int64_t t : test::test_prompt(45, vocab, 3)) b.push_back(t);
  SchedulerOptions so;
  so.max_batch_tokens = 64;  // a piece (and a snapshot) per block
  Collected miss_b;
  {
    SchedulerOptions off = so;
    off.prefix_cache = false;
    Scheduler s(*e, off);
    s.submit(greedy(b, 5, 5), std::make_shared<Collector>(miss_b));
    run_to_idle(s);
  }
  Scheduler s(*e, so);
  Collected first_a, hit_b;
  s.submit(greedy(a, 5, 5), std::make_shared<Collector>(first_a));
  run_to_idle(s);
  s.submit(greedy(b, 5, 5), std::make_shared<Collector>(hit_b));
  run_to_idle(s);
  EXPECT_EQ(first_a.cached, 0);
  EXPECT_EQ(hit_b.cached, 192);  // the system prompt's three whole blocks
  EXPECT_EQ(hit_b.ids, miss_b.ids);
  EXPECT_TRUE(same_logprobs(hit_b.logprobs, miss_b.logprobs));
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.prefix_hit_tokens, 192);
  EXPECT_EQ(st.kv_blocks_used, st.cached_blocks);  // only the cache holds blocks now
  EXPECT_EQ(e->live_sequences(), 0);
}

TEST_P(SchedulerTest, PreemptionUnderASmallCacheChangesNoOutput) {
  auto big = engine();
  const auto ps = prompts(6, big->config().vocab_size);
  std::vector<Collected> want(ps.size()), got(ps.size());
  {
    SchedulerOptions so;
    so.prefix_cache = false;
    Scheduler s(*big, so);
    for (size_t i = 0; i < ps.size(); ++i) s.submit(greedy(ps[i], 40, 3), std::make_shared<Collector>(want[i]));
    run_to_idle(s);
  }
  auto small = engine(4);  // 256 positions for six requests of up to 226
  SchedulerOptions so;
  so.prefix_cache = false;
  Scheduler s(*small, so);
  for (size_t i = 0; i < ps.size(); ++i) s.submit(greedy(ps[i], 40, 3), std::make_shared<Collector>(got[i]));
  run_to_idle(s);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(got[i].ids, want[i].ids) << "request " << i;
    EXPECT_TRUE(same_logprobs(got[i].logprobs, want[i].logprobs)) << "request " << i;
  }
  EXPECT_GT(s.stats().preemptions, 0);
  EXPECT_EQ(small->kv_pool().used_count(), 0);
}

TEST_P(SchedulerTest, CancelStopAndLimits) {
  auto e = engine(12);
  const int64_t vocab = e->config().vocab_size;
  SchedulerOptions so;
  so.max_queue = 3;
  Scheduler s(*e, so);
  Collected cancelled, stopped, stop_token;
  const int64_t id = s.submit(greedy(test::test_prompt(100, vocab, 4), 50), std::make_shared<Collector>(cancelled));
  s.submit(greedy(test::test_prompt(10, vocab, 5), 50), std::make_shared<Collector>(stopped, 3));
  s.step_once();
  s.step_once();
  s.cancel(id);
  s.step_once();
  EXPECT_EQ(cancelled.finish, FinishReason::kCancelled);
  run_to_idle(s);
  EXPECT_EQ(stopped.ids.size(), 3u);
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  // A stop token: the greedy first token of a prompt, made a stop id, ends the request with it.
  RequestSpec spec = greedy(test::test_prompt(10, vocab, 5), 50);
  spec.stop_token_ids = {stopped.ids[0]};
  s.submit(spec, std::make_shared<Collector>(stop_token));
  run_to_idle(s);
  EXPECT_EQ(stop_token.ids, std::vector<int64_t>{stopped.ids[0]});
  EXPECT_EQ(stop_token.finish, FinishReason::kStop);
  // Limits: the queue, a request the cache can never hold, a context overflow.
  Collected unused;
  for (int i = 0; i < 3; ++i) s.submit(greedy({1, 2}, 2), std::make_shared<Collector>(unused));
  EXPECT_EQ(test::error_of([&] { s.submit(greedy({1, 2}, 2), std::make_shared<Collector>(unused)); }),
            "field 'max_queue': the queue holds 3 waiting requests");
  run_to_idle(s);
  EXPECT_EQ(test::error_of([&] { s.submit(greedy(test::test_prompt(1000, vocab), 25), std::make_shared<Collector>(unused)); }),
            "field 'max_tokens': the prompt's 1000 tokens plus 25 to generate exceed the context of 1024 tokens");
  EXPECT_EQ(test::error_of([&] { s.submit(greedy(test::test_prompt(1000, vocab), 20), std::make_shared<Collector>(unused)); }),
            "field 'max_tokens': the prompt's 1000 tokens plus 20 to generate need more than the 12 cache blocks of 64 tokens");
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.running + st.waiting + st.state_slots_used, 0);
  EXPECT_EQ(st.kv_blocks_used, st.cached_blocks);
}

// Chat turns that share a system prompt, rendered in the Kimi-K3 format: the second conversation
// and the follow-up turn resume from the first one's cached blocks and get the logprobs they get
// without the cache.
TEST(SchedulerChat, ChatTurnsSharingASystemPromptHitTheCacheExactly) {
  const test::TinyCheckpoint tiny = test::make_tiny_conditioned(FamilyId::Bf16, TinyArch::KimiK3, 11);
  EngineOptions o;
  o.max_context = 2048;
  Engine e(tiny.dir, o);
  write_tiny_tokenizer(tiny.dir, static_cast<uint32_t>(e.config().vocab_size) - Tokenizer::kNumSpecials);
  const Tokenizer tokenizer = Tokenizer::load(tiny.dir);
  const auto render = [&](const std::vector<std::pair<std::string, std::string>>& turns) {
    chat::Request r;
    for (const auto& [role, text] : turns) {
      chat::Message m;
      m.role = role;
      m.content.push_back(text);
      r.messages.push_back(std::move(m));
    }
    const std::vector<uint32_t> ids = chat::encode(tokenizer, chat::render_k3(r));
    return std::vector<int64_t>(ids.begin(), ids.end());
  };
  const std::string system = "You are a careful assistant. Answer briefly and cite the rules you used. " +
                             std::string(200, 'x');
  const auto first = render({{"system", system}, {"user", "What is the capital of France?"}});
  const auto second = render({{"system", system}, {"user", "Name a prime number above ten."}});
  const auto follow_up = render({{"system", system}, {"user", "What is the capital of France?"},
                                 {"assistant", "Paris."}, {"user", "And of Italy?"}});
  SchedulerOptions so;
  so.max_batch_tokens = 64;
  SchedulerOptions off = so;
  off.prefix_cache = false;
  const auto run = [&](Scheduler& s, const std::vector<int64_t>& prompt) {
    Collected c;
    s.submit(greedy(prompt, 4, 5), std::make_shared<Collector>(c));
    run_to_idle(s);
    return c;
  };
  Scheduler cold(e, off);
  const Collected want_second = run(cold, second), want_follow_up = run(cold, follow_up);
  Scheduler warm(e, so);
  run(warm, first);
  const Collected got_second = run(warm, second), got_follow_up = run(warm, follow_up);
  EXPECT_GE(got_second.cached, 64);
  EXPECT_GE(got_follow_up.cached, got_second.cached);
  EXPECT_EQ(got_second.ids, want_second.ids);
  EXPECT_TRUE(same_logprobs(got_second.logprobs, want_second.logprobs));
  EXPECT_EQ(got_follow_up.ids, want_follow_up.ids);
  EXPECT_TRUE(same_logprobs(got_follow_up.logprobs, want_follow_up.logprobs));
}

INSTANTIATE_TEST_SUITE_P(Tiny, SchedulerTest,
                         ::testing::Values(std::tuple{FamilyId::Bf16, TinyArch::KimiK3},
                                           std::tuple{FamilyId::Bf16, TinyArch::KimiLinear},
                                           std::tuple{FamilyId::Gguf, TinyArch::KimiK3},
                                           std::tuple{FamilyId::ModelOptMixed, TinyArch::KimiK3}),
                         [](const auto& info) {
                           return std::string(family_name(std::get<0>(info.param))) ==
                                          "modelopt-mixed"
                                      ? std::string("ModelOptMixedK3")
                                      : std::string(std::get<0>(info.param) == FamilyId::Gguf ? "GgufK3"
                                                    : std::get<1>(info.param) == TinyArch::KimiK3 ? "Bf16K3"
                                                                                                  : "Bf16Linear");
                         });

}  // namespace
}  // namespace k3
