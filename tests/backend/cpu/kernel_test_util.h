// Shared checks of CPU weight formats (backend/cpu/kernels): a format's fused kernel and its
// many-token path against a float64 dot of the format's exact weights with the exact activation
// values the kernel multiplies (PreparedActivations::values).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/kernels/weight_matrix.h"

namespace k3::cpu::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Both sides multiply identical operand values; they differ only in float32 accumulation order,
// whose error is bounded by ~K·2^-24·Σ|w·x| and is typically √K·2^-24·Σ|w·x|. With K ≤ 2048 the
// bound below (3e-5 of Σ|w·x|) holds with margin, while any wrong scale, code or layout moves the
// result by a sizeable fraction of Σ|w·x|.
inline constexpr double kSummationTolerance = 3e-5;

// Checks dot_rows (every row range [r0, r1) given) and the driver (fused and tile paths) of
// `matrix` against float64, for tokens x [m, K].
inline void expect_matches_float64(const WeightMatrix& matrix, const std::vector<float>& x, int64_t m) {
  const int64_t n = matrix.rows(), k = matrix.cols();
  std::vector<float> w(static_cast<size_t>(n * k));
  matrix.decode_rows(0, n, w.data());
  PreparedActivations a;
  matrix.prepare(x.data(), m, a);
  std::vector<float> xv(static_cast<size_t>(m * k));
  for (int64_t t = 0; t < m; ++t) a.values(t, xv.data() + t * k);

  std::vector<float> y(static_cast<size_t>(m * n), NAN);
  matrix.dot_rows(a, 0, n, y.data(), n);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t r = 0; r < n; ++r) {
      double want = 0, mag = 0;
      for (int64_t i = 0; i < k; ++i) {
        want += static_cast<double>(w[r * k + i]) * xv[t * k + i];
        mag += std::fabs(static_cast<double>(w[r * k + i]) * xv[t * k + i]);
      }
      ASSERT_NEAR(y[t * n + r], want, kSummationTolerance * mag + 1e-30) << matrix.kernel_name() << " row " << r << " token " << t;
    }
  }
  // A sub-range (starting at a multiple of 16, as the driver's chunks do) writes only its rows.
  if (n > 16) {
    std::vector<float> part(static_cast<size_t>(m * n), -7.0f);
    matrix.dot_rows(a, 16, n - 1, part.data(), n);
    for (int64_t t = 0; t < m; ++t) {
      EXPECT_EQ(part[t * n + 0], -7.0f);
      EXPECT_EQ(part[t * n + n - 1], -7.0f);
      EXPECT_FLOAT_EQ(part[t * n + 16], y[t * n + 16]);
    }
  }
}

// The driver: forward() == α · (float64 of decoded rows · values) for one token and for token
// counts past one fused pass (float activations: the decoded tiles' register blocks and their
// tails; integer activations: the fused kernels over cache-sized row blocks).
inline void expect_driver_matches(std::unique_ptr<WeightMatrix> matrix, uint32_t seed) {
  const int64_t n = matrix->rows(), k = matrix->cols();
  std::vector<float> w(static_cast<size_t>(n * k));
  matrix->decode_rows(0, n, w.data());
  const float alpha = matrix->output_scale();
  PreparedActivations a;
  const int64_t m = 13;
  const std::vector<float> x = random_floats(static_cast<size_t>(m * k), seed);
  matrix->prepare(x.data(), m, a);
  std::vector<float> xv(static_cast<size_t>(m * k));
  for (int64_t t = 0; t < m; ++t) a.values(t, xv.data() + t * k);
  auto linear = make_kernel_linear(std::move(matrix));
  for (int64_t tokens : {int64_t{1}, kFusedMaxTokens + 1, int64_t{9}, m}) {
    std::vector<float> y(static_cast<size_t>(tokens * n));
    linear->forward(x.data(), tokens, y.data());
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t r = 0; r < n; ++r) {
        double want = 0, mag = 0;
        for (int64_t i = 0; i < k; ++i) {
          want += static_cast<double>(w[r * k + i]) * xv[t * k + i];
          mag += std::fabs(static_cast<double>(w[r * k + i]) * xv[t * k + i]);
        }
        ASSERT_NEAR(y[t * n + r], alpha * want, kSummationTolerance * alpha * mag + 1e-30)
            << linear->kernel_name() << " tokens " << tokens << " row " << r;
      }
    }
  }
}

// Names a test parameterized by the CPU kernel tier after the tier.
inline std::string tier_name(const ::testing::TestParamInfo<CpuIsa>& info) { return isa_name(info.param); }

}  // namespace k3::cpu::testing
