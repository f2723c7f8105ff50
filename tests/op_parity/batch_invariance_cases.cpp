// Batch invariance of the CPU linear paths: with the path forced (cpu_linear.h LinearPath), a
// token's output row is bit-identical whatever else is in the call — alone, in a batch of 13
// (more than the fused kernels' token groups), or at another position among other tokens. The
// serving engine relies on it: a request's tokens must not depend on what else is in the step.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_linear.h"
#include "core/error.h"
#include "synthetic_linear.h"

namespace k3::op_parity {
namespace {

std::vector<float> random_rows(int64_t m, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<float> run(const cpu::CpuLinear& w, const std::vector<float>& x, int64_t m) {
  std::vector<float> y(static_cast<size_t>(m * w.rows()));
  w.forward(x.data(), m, y.data());
  return y;
}

TEST(BatchInvariance, ForcedLinearPathsGiveEveryTokenTheSameRowInAnyBatch) {
  for (const SyntheticSpec& spec : synthetic_specs()) {
    SyntheticLinear& s = synthetic_linear(spec);
    for (const cpu::ActivationNumerics numerics : {cpu::ActivationNumerics::WeightOnly, cpu::ActivationNumerics::CheckpointContract}) {
      std::unique_ptr<cpu::CpuLinear> w;
      try {
        w = cpu::make_cpu_linear(s.plan.bindings[0], s.plan.params[0], *s.files, -1, {numerics});
      } catch (const Error&) {
        continue;  // a contract whose scales the synthetic weight does not carry
      }
      const int64_t k = w->cols(), n = w->rows(), m = 13;
      const std::vector<float> x = random_rows(m, k, 7), others = random_rows(6, k, 8);
      for (const cpu::LinearPath path : {cpu::LinearPath::kFused, cpu::LinearPath::kTiles}) {
        const cpu::ScopedLinearPath scoped(path);
        const std::vector<float> batch = run(*w, x, m);
        for (int64_t t = 0; t < m; ++t) {
          const std::vector<float> one(x.begin() + t * k, x.begin() + (t + 1) * k);
          std::vector<float> mixed = others;  // the token at row 3 of 7, among other tokens
          mixed.insert(mixed.begin() + 3 * k, one.begin(), one.end());
          const std::vector<float> alone = run(*w, one, 1), among = run(*w, mixed, 7);
          const std::string what = spec.scheme.name() + (numerics == cpu::ActivationNumerics::WeightOnly ? "" : " (contract)") +
                                   (path == cpu::LinearPath::kFused ? " fused" : " tiles") + " token " + std::to_string(t);
          const bool same_in_batch = std::memcmp(alone.data(), batch.data() + t * n, n * sizeof(float)) == 0;
          const bool same_among = std::memcmp(alone.data(), among.data() + 3 * n, n * sizeof(float)) == 0;
          EXPECT_TRUE(same_in_batch) << what << " in the batch of 13";
          EXPECT_TRUE(same_among) << what << " among others";
          if (!same_in_batch || !same_among) break;
        }
      }
    }
  }
}

}  // namespace
}  // namespace k3::op_parity
