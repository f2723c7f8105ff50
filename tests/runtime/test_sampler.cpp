// The sampler: greedy argmax, top-k / top-p cut-offs, seeded determinism, parameter checks.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "runtime/sampler.h"

namespace k3 {
namespace {

const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};

SamplingParams sampling(double temperature, int64_t top_k, double top_p, uint64_t seed) {
  SamplingParams p;
  p.greedy = false;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

TEST(Sampler, GreedyTakesTheFirstMaximum) { EXPECT_EQ(Sampler(SamplingParams{}).next(kLogits), 1); }

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  Sampler k1(sampling(1.0, 1, 1.0, 3)), p0(sampling(1.0, 0, 1e-6, 3));
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(k1.next(kLogits), 1);
    EXPECT_EQ(p0.next(kLogits), 1);
  }
}

TEST(Sampler, TopKKeepsOnlyTheBestTokens) {
  Sampler s(sampling(5.0, 3, 1.0, 9));
  std::map<int64_t, int> seen;
  for (int i = 0; i < 2000; ++i) ++seen[s.next(kLogits)];
  EXPECT_EQ(seen.size(), 3u);  // ids 1, 3 (logit 2) and 4 (logit 1)
  EXPECT_TRUE(seen.count(1) && seen.count(3) && seen.count(4));
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // At T=1: p(1)=p(3)=0.358, p(4)=0.132, p(0)=0.080, p(2)=0.018; 0.358+0.358 < 0.8 ≤ +0.132.
  Sampler s(sampling(1.0, 0, 0.8, 5));
  std::map<int64_t, int> seen;
  for (int i = 0; i < 4000; ++i) ++seen[s.next(kLogits)];
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_FALSE(seen.count(0) || seen.count(2));
  // Renormalised over the nucleus id 4 has probability 0.132/0.848 ≈ 0.156.
  EXPECT_NEAR(seen[4] / 4000.0, 0.156, 0.03);
}

TEST(Sampler, SameSeedSameSequence) {
  Sampler a(sampling(1.0, 0, 1.0, 42)), b(sampling(1.0, 0, 1.0, 42)), c(sampling(1.0, 0, 1.0, 43));
  std::vector<int64_t> sa, sb, sc;
  for (int i = 0; i < 64; ++i) {
    sa.push_back(a.next(kLogits));
    sb.push_back(b.next(kLogits));
    sc.push_back(c.next(kLogits));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Sampler, RejectsOutOfRangeParameters) {
  auto message = [](const SamplingParams& p) {
    try {
      validate(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(sampling(0.0, 0, 1.0, 0)), "field 'temperature': must be a finite number > 0");
  EXPECT_EQ(message(sampling(1.0, -1, 1.0, 0)), "field 'top_k': must be ≥ 0 (0 = no limit)");
  EXPECT_EQ(message(sampling(1.0, 0, 1.5, 0)), "field 'top_p': must be in (0, 1]");
  EXPECT_EQ(message(sampling(1.0, 0, 0.0, 0)), "field 'top_p': must be in (0, 1]");
}

TEST(Sampler, RejectsOutOfRangeExtensions) {
  auto message = [](SamplingParams p) {
    try {
      validate(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  SamplingParams p;  // greedy: the extensions are still checked
  p.min_p = 1.5;
  EXPECT_EQ(message(p), "field 'min_p': must be in [0, 1]");
  p.min_p = 0;
  p.presence_penalty = 2.5;
  EXPECT_EQ(message(p), "field 'presence_penalty': must be in [-2, 2]");
  p.presence_penalty = -2;
  p.frequency_penalty = NAN;
  EXPECT_EQ(message(p), "field 'frequency_penalty': must be in [-2, 2]");
  p.frequency_penalty = 2;
  EXPECT_EQ(message(p), "no error");
}

TEST(Sampler, GreedyAppliesPresencePenalty) {
  SamplingParams p;
  p.presence_penalty = 1.0;
  Sampler s(p);
  // 2.0 (id 1) → 1.0 after its first use; then id 3 (2.0) wins, then both at 1.0 and the lower id.
  EXPECT_EQ(s.next(kLogits), 1);
  EXPECT_EQ(s.next(kLogits), 3);
  EXPECT_EQ(s.next(kLogits), 1);  // 1: 1.0, 3: 1.0, 4: 1.0 → lowest id; presence does not grow
  EXPECT_EQ(s.next(kLogits), 1);
}

TEST(Sampler, GreedyAppliesFrequencyPenaltyAndObserve) {
  SamplingParams p;
  p.frequency_penalty = 0.75;
  Sampler s(p);
  s.observe(1);
  s.observe(3);  // ids 1 and 3 at 1.25: id 4 (1.0) still below
  EXPECT_EQ(s.next(kLogits), 1);  // 1 → 0.5 after
  EXPECT_EQ(s.next(kLogits), 3);  // 3 → 0.5
  EXPECT_EQ(s.next(kLogits), 4);  // 4 (1.0) now best
  SamplingParams negative;
  negative.frequency_penalty = -2;  // a negative penalty favours repeats
  Sampler r(negative);
  r.observe(4);
  EXPECT_EQ(r.next(kLogits), 4);
  EXPECT_EQ(r.next(kLogits), 4);
}

TEST(Sampler, NoExtensionsKeepsTheSequence) {
  SamplingParams a = sampling(0.7, 3, 0.9, 11), b = a;
  b.min_p = 0;
  b.presence_penalty = 0;
  Sampler sa(a), sb(b);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(sa.next(kLogits), sb.next(kLogits));
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  // At T=1: p(1)=p(3)=0.358, p(4)=0.132 (ratio 0.368), p(0) ratio 0.223, p(2) ratio 0.05.
  SamplingParams p = sampling(1.0, 0, 1.0, 7);
  p.min_p = 0.3;
  Sampler s(p);
  std::map<int64_t, int> seen;
  for (int i = 0; i < 4000; ++i) ++seen[s.next(kLogits)];
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_FALSE(seen.count(0) || seen.count(2));
  EXPECT_NEAR(seen[4] / 4000.0, 0.132 / 0.848, 0.03);
  p.min_p = 1.0;  // only the best (ties at the maximum stay)
  Sampler best(p);
  for (int i = 0; i < 50; ++i) {
    const int64_t id = best.next(kLogits);
    EXPECT_TRUE(id == 1 || id == 3);
  }
}

// A token mask (bit i of word i/32): only allowed tokens are ever picked, greedy or sampled, and
// among them the choice is the one the unmasked sampler makes over the allowed logits alone.
TEST(Sampler, MaskRestrictsTheChoice) {
  const std::vector<uint32_t> allow_0_2_4 = {0b10101u};
  EXPECT_EQ(Sampler(SamplingParams{}).next(kLogits, allow_0_2_4), 4);  // logits 0.5, -1, 1
  Sampler hot(sampling(50.0, 0, 1.0, 5));
  std::map<int64_t, int> seen;
  for (int i = 0; i < 3000; ++i) ++seen[hot.next(kLogits, allow_0_2_4)];
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_TRUE(seen.count(0) && seen.count(2) && seen.count(4));
  // One allowed token is always the pick, whatever the cut-offs.
  Sampler nucleus(sampling(1.0, 2, 0.5, 7));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(nucleus.next(kLogits, std::vector<uint32_t>{0b00100u}), 2);
  // The same seed over the allowed logits alone (the others far below) draws the same ids.
  std::vector<float> alone = kLogits;
  alone[1] = alone[3] = -1e30f;
  Sampler a(sampling(1.3, 0, 0.9, 11)), b(sampling(1.3, 0, 0.9, 11));
  for (int i = 0; i < 200; ++i) EXPECT_EQ(a.next(kLogits, allow_0_2_4), b.next(alone));
}

TEST(Sampler, MaskAllowingNothingIsAnError) {
  Sampler s(SamplingParams{});
  EXPECT_THROW(s.next(kLogits, std::vector<uint32_t>{0u}), Error);
  EXPECT_THROW(s.next(kLogits, std::vector<uint32_t>{0b100000u}), Error);  // only a token past the vocabulary
}

TEST(Logprobs, LogSoftmaxOfRawLogitsAndSortedTop) {
  const TokenLogprobs lp = logprobs_of(kLogits, 4, 3);
  double z = 0;
  for (float l : kLogits) z += std::exp(static_cast<double>(l));
  EXPECT_EQ(lp.id, 4);
  EXPECT_NEAR(lp.logprob, 1.0 - std::log(z), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);  // ties by id
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 4);
  EXPECT_FLOAT_EQ(lp.top[2].second, lp.logprob);
  EXPECT_TRUE(logprobs_of(kLogits, 0, 0).top.empty());
  EXPECT_EQ(logprobs_of(kLogits, 0, 20).top.size(), kLogits.size());
  // Large logits do not overflow (double accumulation, max subtracted).
  const std::vector<float> big = {1000.0f, 1000.0f};
  EXPECT_NEAR(logprobs_of(big, 0, 0).logprob, -std::log(2.0), 1e-6);
}

}  // namespace
}  // namespace k3
