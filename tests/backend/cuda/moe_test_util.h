// Shared by the grouped expert-GEMM tests (test_moe, test_moe_w4, test_moe_w4a8, test_moe_ggml): the
// float64 reference over a dispatch's sorted rows, the element check against it, and the check of the
// routing weights applied in a GEMM's epilogue (MoeDispatch::row_weight).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/tensor.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"

namespace k3::cuda::test {

// For every expert e and sorted row r of e (off: the dispatch's expert offsets, E + 1 of them):
// ref[r·N + n] = scale(e, n) · Σ_i x(r, i) · w[(e·N + n)·K + i] in float64, and abs_sum the same
// over |products| (the scale of fp32 summation error). x(r, i): sorted row r's activation i.
struct MoeReference {
  std::vector<double> ref, abs_sum;
};
template <typename X, typename Scale>
MoeReference moe_reference(const std::vector<int32_t>& off, int64_t N, int64_t K, X x, const std::vector<float>& w,
                           Scale scale) {
  const int64_t E = static_cast<int64_t>(off.size()) - 1, R = off.back();
  MoeReference m{std::vector<double>(static_cast<size_t>(R * N)), std::vector<double>(static_cast<size_t>(R * N))};
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = off[e]; r < off[e + 1]; ++r) {
      for (int64_t n = 0; n < N; ++n) {
        const float* wr = &w[static_cast<size_t>((e * N + n) * K)];
        double acc = 0, abs = 0;
        for (int64_t i = 0; i < K; ++i) {
          const double p = x(r, i) * static_cast<double>(wr[i]);
          acc += p;
          abs += std::fabs(p);
        }
        const double s = scale(e, n);
        m.ref[static_cast<size_t>(r * N + n)] = s * acc;
        m.abs_sum[static_cast<size_t>(r * N + n)] = std::fabs(s) * abs;
      }
    }
  }
  return m;
}

// Every element within sum_coeff · abs_sum (accumulation) + half a bf16 step of the result when the
// output is bf16; the first five outliers are reported with their row and column.
inline void expect_within_reference(const std::vector<float>& got, const MoeReference& m, int64_t N, DType out,
                                    double sum_coeff) {
  const double rel_out = out == DType::kBF16 ? 1.0 / 256 : 0.0;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rel_out * std::fabs(m.ref[i]) + sum_coeff * m.abs_sum[i] + 1e-30;
    if (!(std::fabs(got[i] - m.ref[i]) <= tol) && ++bad <= 5) {
      ADD_FAILURE() << "row " << static_cast<int64_t>(i) / N << " col " << static_cast<int64_t>(i) % N << ": "
                    << got[i] << " vs " << m.ref[i] << " (tolerance " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0);
}

// R random routing weights in (0.05, 1] for a dispatch's sorted rows: host copy and device copy.
struct RowWeights {
  std::vector<float> host;
  const float* device = nullptr;
};
inline RowWeights random_row_weights(Rng& rng, int64_t rows) {
  RowWeights w{rng.uniform(static_cast<size_t>(rows), 0.05f, 1.0f), nullptr};
  w.device = upload_f32(arena(), w.host.data(), 1, rows, DType::kF32, "row weights").as<const float>();
  return w;
}

// f32 outputs of one kernel over the same inputs, with and without row weights: weighted[r·N + n] =
// w[r] · plain[r·N + n] up to the roundings the weight adds where it joins the epilogue's scale
// (≤ 5e-7 relative); rows past w (not covered by the dispatch) are not compared.
inline void expect_row_weighted(const std::vector<float>& weighted, const std::vector<float>& plain,
                                const RowWeights& w, int64_t N) {
  int64_t bad = 0;
  for (size_t i = 0; i < std::min(weighted.size(), w.host.size() * static_cast<size_t>(N)); ++i) {
    const double want = static_cast<double>(w.host[i / static_cast<size_t>(N)]) * plain[i];
    if (!(std::fabs(weighted[i] - want) <= 5e-7 * std::fabs(want) + 1e-30) && ++bad <= 5) {
      ADD_FAILURE() << "row " << static_cast<int64_t>(i) / N << " col " << static_cast<int64_t>(i) % N << ": "
                    << weighted[i] << " vs " << want << " (row weight " << w.host[i / static_cast<size_t>(N)] << ")";
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace k3::cuda::test
