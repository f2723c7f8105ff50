// The chunked KDA prefill form (spec §6.6) against the token-by-token recurrence (§6.5) on random
// inputs: lengths that are not multiples of the chunk, a non-zero incoming state, and gates strong
// enough that the in-chunk cumulative decay underflows exp() (the form must never divide by it).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/kda.h"

namespace k3::cpu {
namespace {

struct Inputs {
  int64_t T, D;
  std::vector<float> q, k, v, g, beta, state;
  KdaHeadInputs view() const { return {T, D, q.data(), k.data(), v.data(), g.data(), beta.data()}; }
};

Inputs random_inputs(int64_t T, int64_t D, float gate_scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Inputs in{T, D, {}, {}, {}, {}, {}, {}};
  auto l2 = [&](std::vector<float>& x, float scale) {
    for (int64_t t = 0; t < T; ++t) {
      float ss = 0;
      for (int64_t d = 0; d < D; ++d) ss += x[t * D + d] * x[t * D + d];
      for (int64_t d = 0; d < D; ++d) x[t * D + d] *= scale / std::sqrt(ss + 1e-6f);
    }
  };
  for (auto* x : {&in.q, &in.k, &in.v}) {
    for (int64_t i = 0; i < T * D; ++i) x->push_back(normal(rng));
  }
  l2(in.q, 1.0f / std::sqrt(static_cast<float>(D)));
  l2(in.k, 1.0f);
  for (int64_t i = 0; i < T * D; ++i) in.g.push_back(-gate_scale * unit(rng));
  for (int64_t t = 0; t < T; ++t) in.beta.push_back(unit(rng));
  for (int64_t i = 0; i < D * D; ++i) in.state.push_back(0.3f * normal(rng));
  return in;
}

double max_abs(const std::vector<float>& x) {
  double m = 0;
  for (float v : x) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

void expect_forms_agree(int64_t T, int64_t D, float gate_scale, int64_t chunk, uint64_t seed) {
  const Inputs in = random_inputs(T, D, gate_scale, seed);
  std::vector<float> s_rec = in.state, s_chk = in.state, o_rec(T * D), o_chk(T * D);
  kda_head_recurrent(in.view(), s_rec.data(), o_rec.data());
  kda_head_chunked(in.view(), s_chk.data(), o_chk.data(), chunk);
  // fp32 with different association orders: agreement to ~1e-6 of the magnitudes.
  EXPECT_LT(max_diff(o_chk, o_rec), 2e-5 * std::max(1.0, max_abs(o_rec))) << "T=" << T << " D=" << D;
  EXPECT_LT(max_diff(s_chk, s_rec), 2e-5 * std::max(1.0, max_abs(s_rec))) << "T=" << T << " D=" << D;
  EXPECT_GT(max_abs(o_rec), 1e-3);  // the comparison is not between zeros
}

TEST(KdaChunked, MatchesTheRecurrenceOverSeveralChunks) { expect_forms_agree(150, 32, 0.5f, kKdaChunk, 1); }

TEST(KdaChunked, MatchesTheRecurrenceWithUnderflowingDecay) {
  // g down to −12 per step: the in-chunk cumulative decay reaches e^-700, far below fp32's range.
  expect_forms_agree(131, 16, 12.0f, kKdaChunk, 2);
}

TEST(KdaChunked, MatchesTheRecurrenceForShortAndOddChunks) {
  expect_forms_agree(2, 16, 1.0f, kKdaChunk, 3);
  expect_forms_agree(37, 16, 1.0f, 5, 4);
}

TEST(KdaChunked, RecurrenceMatchesTheSpecFormulaOnOneStep) {
  // One token by hand (D = 2): S ← diag(α)S; u = β(v − Sᵀk); S += k uᵀ; o = Sᵀq.
  const float q[2] = {0.5f, -0.25f}, k[2] = {0.6f, 0.8f}, v[2] = {1.0f, 2.0f}, g[2] = {std::log(0.5f), 0.0f}, beta = 0.5f;
  float S[4] = {1, 2, 3, 4};
  float o[2];
  kda_head_recurrent({1, 2, q, k, v, g, &beta}, S, o);
  // decayed S = [[0.5, 1], [3, 4]]; Sᵀk = [0.3+2.4, 0.6+3.2] = [2.7, 3.8]; u = 0.5·[−1.7, −1.8] = [−0.85, −0.9]
  const float want_S[4] = {0.5f - 0.51f, 1.0f - 0.54f, 3.0f - 0.68f, 4.0f - 0.72f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(S[i], want_S[i], 1e-6f);
  EXPECT_NEAR(o[0], 0.5f * want_S[0] - 0.25f * want_S[2], 1e-6f);
  EXPECT_NEAR(o[1], 0.5f * want_S[1] - 0.25f * want_S[3], 1e-6f);
}

}  // namespace
}  // namespace k3::cpu
