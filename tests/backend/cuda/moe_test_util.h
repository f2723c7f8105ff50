// Shared by the grouped expert-GEMM tests (test_moe, test_moe_w4, test_moe_w4a8, test_moe_ggml,
// test_moe_fp8_block): random dispatches with their sorted activations, the float64 reference over a
// dispatch's sorted rows, the element check against it, and the check of the
// routing weights applied in a GEMM's epilogue (MoeDispatch::row_weight).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/tensor.h"
#include "backend/cuda/core/upload.h"
#include "backend/cuda/moe/moe.h"
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

// How make_routed's tokens pick experts: k distinct experts each, with repeats (one expert may take
// several rows of a token), or k distinct ones from a quarter of the experts (the others get none).
enum class PickMode { kDistinct, kRepeats, kSubset };

inline std::vector<int32_t> make_ids(Rng& rng, int64_t T, int64_t k, int64_t E, PickMode mode) {
  std::vector<int32_t> pool(static_cast<size_t>(E));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.gen());
  if (mode == PickMode::kSubset) pool.resize(static_cast<size_t>(std::max<int64_t>(k, E / 4)));
  const int n = static_cast<int>(pool.size());
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      if (mode == PickMode::kRepeats) {
        ids[t * k + j] = pool[rng.uniform_int(0, n - 1)];
      } else {
        std::swap(pool[j], pool[rng.uniform_int(static_cast<int>(j), n - 1)]);
        ids[t * k + j] = pool[j];
      }
    }
  }
  return ids;
}

struct RoutedCase {
  int64_t tokens, top_k, experts, n, k;
  PickMode routing;
};

// A dispatch of random routing on the device, its offsets and sorted tokens on the host, and the
// sorted rows of bf16-rounded random activations (device xs, host copy).
struct Routed {
  MoeDispatch d;
  std::vector<int32_t> off, sorted;
  DeviceTensor xs;
  std::vector<float> xs_host;
};

inline Routed make_routed(Rng& rng, const RoutedCase& c) {
  Arena& a = arena();
  const int64_t T = c.tokens, k = c.top_k, E = c.experts, K = c.k, R = T * k;
  Routed s;
  const std::vector<int32_t> ids = make_ids(rng, T, k, E, c.routing);
  const DeviceTensor dids = a.alloc_tensor(DType::kI32, T, k, "ids");
  copy_bytes_to_device(dids.data, ids.data(), ids.size() * sizeof(int32_t));
  s.d = moe_dispatch_view(a.alloc(moe_dispatch_bytes(T, k, E), "dispatch"), T, k, E);
  moe_dispatch(dids, s.d, nullptr);
  s.off = download_i32(DeviceTensor(s.d.expert_offsets, DType::kI32, 1, E + 1));
  s.sorted = download_i32(DeviceTensor(s.d.sorted_token, DType::kI32, 1, R));
  const std::vector<float> x = round_bf16(rng.normal(static_cast<size_t>(T * K)));
  s.xs = a.alloc_tensor(DType::kBF16, R, K, "xs");
  moe_gather(upload_f32(a, x.data(), T, K, DType::kBF16, "x"), s.d, s.xs, nullptr);
  s.xs_host.resize(static_cast<size_t>(R * K));
  for (int64_t r = 0; r < R; ++r) std::copy_n(&x[static_cast<size_t>(s.sorted[r] * K)], K, &s.xs_host[static_cast<size_t>(r * K)]);
  return s;
}

}  // namespace k3::cuda::test
