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

}  // namespace
}  // namespace k3
