// MoE dispatch, gather, grouped GEMM and combine (backend/cuda/moe/moe.h) against host references, on
// fresh random routings (the seed is printed; K3_TEST_SEED replays one).
//
// Exact: the dispatch (offsets, the stable sorted order, pick_row, every tile map) against a host
// counting sort, and the gather (bf16 rounding of f32 rows is RNE on both sides).
// Grouped GEMM against float64 over the same bf16 inputs, per element with S = Σ_k |x_k·w_k|:
// |y − ref| ≤ 2e-5·S (fp32 accumulation) for f32 out, + 2^-8·|ref| (bf16 rounding) for bf16 out.
// Combine against float64: |out − ref| ≤ 1e-5·(Σ_j |w_j·y_j| + |old|), + 2^-8·|ref| for bf16 out.
// End to end (router → dispatch → gather → GEMM1 → gated_activation → GEMM2 → combine) against a
// float64 MoE that rounds the activation to bf16 where the GPU does: |out − ref| ≤ 2^-6·S + 2^-8·|ref|,
// S = Σ_j |w_j| Σ_i |h_i·w2_i| (an activation that rounds to the neighbouring bf16 value moves a
// term by at most 2^-7 of itself; bf16 GEMM2 output adds 2^-8), and the relative L2 error is checked
// much tighter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cuda/moe/moe.h"
#include "backend/cuda/moe/moe_tiles.h"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/core/stream.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"
#include "moe_test_util.h"

namespace k3::cuda {
namespace {

constexpr MoeTile kTiles[] = {MoeTile::kM16, MoeTile::kM64, MoeTile::kM128};

enum class Routing {
  kUniform,  // k distinct experts per token, uniform (the router's shape)
  kSubset,   // k distinct experts per token from a random E/16 of them: most experts get no rows
  kOne,      // every pick on one expert (duplicates within a token)
};

std::vector<int32_t> make_ids(test::Rng& rng, int64_t T, int64_t k, int64_t E, Routing mode) {
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  std::vector<int32_t> pool(static_cast<size_t>(E));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.gen());
  if (mode == Routing::kOne) {
    std::fill(ids.begin(), ids.end(), pool[0]);
    return ids;
  }
  if (mode == Routing::kSubset) pool.resize(static_cast<size_t>(std::max(k, E / 16)));
  const int n = static_cast<int>(pool.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {  // partial Fisher–Yates: k distinct picks
      std::swap(pool[j], pool[rng.uniform_int(static_cast<int>(j), n - 1)]);
      ids[t * k + j] = pool[j];
    }
  }
  return ids;
}

DeviceTensor upload_ids(const std::vector<int32_t>& ids, int64_t T, int64_t k) {
  const DeviceTensor t = test::arena().alloc_tensor(DType::kI32, T, k, "ids");
  if (!ids.empty()) copy_bytes_to_device(t.data, ids.data(), ids.size() * sizeof(int32_t));
  return t;
}

MoeDispatch alloc_dispatch(int64_t T, int64_t k, int64_t E) {
  return moe_dispatch_view(test::arena().alloc(moe_dispatch_bytes(T, k, E), "dispatch"), T, k, E);
}

std::vector<int32_t> download_ints(const int32_t* p, int64_t n) {
  if (n == 0) return {};
  return download_i32(DeviceTensor(const_cast<int32_t*>(p), DType::kI32, 1, n));
}

// The host counting sort: what moe_dispatch must produce.
struct HostDispatch {
  std::vector<int32_t> offsets, sorted_token, sorted_expert, pick_row;
  std::vector<int32_t> tiles[kMoeTileHeights];  // {expert, first row, expert's first tile, its tile count}
};

HostDispatch host_dispatch(const std::vector<int32_t>& ids, int64_t T, int64_t k, int64_t E) {
  const int64_t R = T * k;
  HostDispatch h;
  h.offsets.assign(static_cast<size_t>(E + 1), 0);
  for (int32_t e : ids) ++h.offsets[e + 1];
  std::partial_sum(h.offsets.begin(), h.offsets.end(), h.offsets.begin());
  std::vector<int32_t> cursor(h.offsets.begin(), h.offsets.end() - 1);
  h.sorted_token.resize(static_cast<size_t>(R));
  h.sorted_expert.resize(static_cast<size_t>(R));
  h.pick_row.resize(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    const int32_t pos = cursor[ids[r]]++;
    h.sorted_token[pos] = static_cast<int32_t>(r / k);
    h.sorted_expert[pos] = ids[r];
    h.pick_row[r] = pos;
  }
  for (int i = 0; i < kMoeTileHeights; ++i) {
    const int rows = moe_tile_rows(kTiles[i]);
    for (int32_t e = 0; e < E; ++e) {
      const int32_t first = static_cast<int32_t>(h.tiles[i].size() / 4);
      const int32_t count = (h.offsets[e + 1] - h.offsets[e] + rows - 1) / rows;
      for (int32_t r = h.offsets[e]; r < h.offsets[e + 1]; r += rows) h.tiles[i].insert(h.tiles[i].end(), {e, r, first, count});
    }
  }
  return h;
}

// Every array of the dispatch d equals the host's: offsets, sorted rows, pick rows, each tile map.
void expect_dispatch(const MoeDispatch& d, const HostDispatch& ref) {
  const int64_t R = d.rows();
  EXPECT_EQ(download_ints(d.expert_offsets, d.experts + 1), ref.offsets);
  EXPECT_EQ(download_ints(d.sorted_token, R), ref.sorted_token);
  EXPECT_EQ(download_ints(d.pick_row, R), ref.pick_row);
  for (int i = 0; i < kMoeTileHeights; ++i) {
    const MoeTileMap map = moe_tile_map(d, kTiles[i]);
    const int64_t count = download_ints(map.count, 1)[0];
    ASSERT_EQ(count, static_cast<int64_t>(ref.tiles[i].size() / 4)) << "tile height " << moe_tile_rows(kTiles[i]);
    EXPECT_LE(count, map.bound);
    EXPECT_EQ(download_ints(map.tiles, 4 * count), ref.tiles[i]) << "tile height " << moe_tile_rows(kTiles[i]);
  }
}

// Counts the elements outside |out − ref| ≤ rel_out·|ref| + rel_sum·sum (non-finite included) and
// reports the first few.
int64_t count_bad(const std::vector<float>& out, const std::vector<double>& ref, const std::vector<double>& sum,
                  int64_t cols, double rel_out, double rel_sum) {
  int64_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double tol = rel_out * std::fabs(ref[i]) + rel_sum * sum[i] + 1e-30;
    if (!(std::fabs(out[i] - ref[i]) <= tol) && ++bad <= 5) {
      ADD_FAILURE() << "row " << static_cast<int64_t>(i) / cols << " col " << static_cast<int64_t>(i) % cols << ": "
                    << out[i] << " vs " << ref[i] << " (tolerance " << tol << ")";
    }
  }
  return bad;
}

// ---- dispatch -------------------------------------------------------------------------------------

struct DispatchCase {
  int64_t tokens, top_k, experts;
  Routing routing;
};

class MoeDispatchTest : public ::testing::TestWithParam<DispatchCase> {};

TEST_P(MoeDispatchTest, MatchesHostCountingSort) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const DispatchCase c = GetParam();
  SCOPED_TRACE("T " + std::to_string(c.tokens) + " k " + std::to_string(c.top_k) + " E " + std::to_string(c.experts) +
               ", seed " + std::to_string(rng.seed()));
  const int64_t T = c.tokens, k = c.top_k, E = c.experts;
  const std::vector<int32_t> ids = make_ids(rng, T, k, E, c.routing);
  const HostDispatch ref = host_dispatch(ids, T, k, E);
  // ids as a column slice of a wider buffer: the kernel honours ld.
  const DeviceTensor wide = test::arena().alloc_tensor(DType::kI32, T, k + 3, "ids wide");
  std::vector<int32_t> wide_host(static_cast<size_t>(T * (k + 3)), -7);
  for (int64_t t = 0; t < T; ++t) std::copy_n(ids.begin() + t * k, k, wide_host.begin() + t * (k + 3) + 1);
  copy_bytes_to_device(wide.data, wide_host.data(), wide_host.size() * sizeof(int32_t));
  const MoeDispatch d = alloc_dispatch(T, k, E);
  // The whole buffer (it starts with the offsets) poisoned: every entry checked below must be written.
  poison(DeviceTensor(d.expert_offsets, DType::kU8, 1, static_cast<int64_t>(moe_dispatch_bytes(T, k, E))));
  moe_dispatch(wide.col_slice(1, k), d, nullptr);

  expect_dispatch(d, ref);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeDispatchTest,
    ::testing::Values(DispatchCase{1, 8, 256, Routing::kUniform}, DispatchCase{3, 8, 256, Routing::kUniform},
                      DispatchCase{64, 8, 256, Routing::kUniform}, DispatchCase{1000, 8, 256, Routing::kUniform},
                      DispatchCase{1000, 8, 256, Routing::kSubset}, DispatchCase{1000, 8, 256, Routing::kOne},
                      DispatchCase{1, 16, 896, Routing::kUniform}, DispatchCase{64, 16, 896, Routing::kUniform},
                      DispatchCase{1000, 16, 896, Routing::kUniform}, DispatchCase{4096, 16, 896, Routing::kUniform},
                      DispatchCase{4096, 16, 896, Routing::kOne}, DispatchCase{300, 16, 896, Routing::kSubset},
                      DispatchCase{37, 6, 1024, Routing::kUniform}, DispatchCase{5, 1, 1, Routing::kOne},
                      DispatchCase{0, 8, 256, Routing::kUniform}),
    test::CaseIndexName());

// The one-expert dispatch of a dense linear run as a bank (moe_one_expert_dispatch) writes what the
// counting sort makes from T zero ids, every array of the poisoned buffer.
TEST(MoeOneExpertDispatch, EqualsTheDispatchOfZeroIds) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  for (const int64_t T : {0, 1, 2, 15, 16, 17, 63, 64, 65, 128, 129, 1000, 8192}) {
    SCOPED_TRACE("T " + std::to_string(T));
    const HostDispatch ref = host_dispatch(std::vector<int32_t>(static_cast<size_t>(T), 0), T, 1, 1);
    const MoeDispatch d = alloc_dispatch(T, 1, 1);
    poison(DeviceTensor(d.expert_offsets, DType::kU8, 1, static_cast<int64_t>(moe_dispatch_bytes(T, 1, 1))));
    moe_one_expert_dispatch(d, nullptr);
    expect_dispatch(d, ref);
  }
}

TEST(MoeOneExpertDispatch, RejectsAViewOfSeveralExpertsOrPicks) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  EXPECT_THROW(moe_one_expert_dispatch(alloc_dispatch(4, 1, 2), nullptr), Error);
  EXPECT_THROW(moe_one_expert_dispatch(alloc_dispatch(4, 2, 1), nullptr), Error);
}

// ---- gather ---------------------------------------------------------------------------------------

struct GatherCase {
  int64_t tokens, top_k, experts, cols;
  DType x;
};

class MoeGatherTest : public ::testing::TestWithParam<GatherCase> {};

TEST_P(MoeGatherTest, Exact) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const GatherCase c = GetParam();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t T = c.tokens, k = c.top_k, E = c.experts, K = c.cols, R = T * k;
  const std::vector<int32_t> ids = make_ids(rng, T, k, E, Routing::kUniform);
  const HostDispatch ref = host_dispatch(ids, T, k, E);
  // x as columns [8, 8 + K) of a wider matrix (ld > cols).
  const std::vector<float> x = rng.normal(static_cast<size_t>(T * (K + 8)));
  const DeviceTensor dx = upload_f32(test::arena(), x.data(), T, K + 8, c.x, "x").col_slice(8, K);
  const MoeDispatch d = alloc_dispatch(T, k, E);
  moe_dispatch(upload_ids(ids, T, k), d, nullptr);
  const DeviceTensor xs = test::arena().alloc_tensor(DType::kBF16, R, K, "xs");
  poison(xs);
  moe_gather(dx, d, xs, nullptr);
  const std::vector<float> got = download_f32(xs);
  int64_t bad = 0;
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t i = 0; i < K; ++i) {
      const float want = test::round_bf16(x[ref.sorted_token[r] * (K + 8) + 8 + i]);
      const float v = got[r * K + i];
      if (std::memcmp(&v, &want, sizeof(float)) != 0 && ++bad <= 5) {
        ADD_FAILURE() << "row " << r << " col " << i << ": " << v << " vs " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeGatherTest,
                         ::testing::Values(GatherCase{1, 8, 256, 7168, DType::kF32},
                                           GatherCase{64, 8, 256, 2304, DType::kF32},
                                           GatherCase{1000, 16, 896, 136, DType::kBF16},
                                           GatherCase{3, 8, 256, 3584, DType::kBF16}),
                         test::CaseIndexName());

// ---- grouped GEMM ---------------------------------------------------------------------------------

struct GemmCase {
  int64_t tokens, top_k, experts, n, k;
  Routing routing;
};

class MoeGroupedGemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(MoeGroupedGemmTest, MatchesFloat64) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const GemmCase c = GetParam();
  SCOPED_TRACE("T " + std::to_string(c.tokens) + " k " + std::to_string(c.top_k) + " E " + std::to_string(c.experts) +
               " N " + std::to_string(c.n) + " K " + std::to_string(c.k) + ", seed " + std::to_string(rng.seed()));
  const int64_t T = c.tokens, k = c.top_k, E = c.experts, N = c.n, K = c.k, R = T * k;
  const std::vector<int32_t> ids = make_ids(rng, T, k, E, c.routing);
  const HostDispatch hd = host_dispatch(ids, T, k, E);
  const std::vector<float> x = test::round_bf16(rng.normal(static_cast<size_t>(T * K)));
  const std::vector<float> w = test::round_bf16(rng.normal(static_cast<size_t>(E * N * K)));
  Arena& a = test::arena();
  const DeviceTensor dx = upload_f32(a, x.data(), T, K, DType::kBF16, "x");
  const DeviceTensor dw = upload_f32(a, w.data(), E * N, K, DType::kBF16, "w");
  const MoeDispatch d = alloc_dispatch(T, k, E);
  moe_dispatch(upload_ids(ids, T, k), d, nullptr);
  const DeviceTensor xs = a.alloc_tensor(DType::kBF16, R, K, "xs");
  moe_gather(dx, d, xs, nullptr);

  std::vector<double> ref(static_cast<size_t>(R * N)), sum(ref.size());
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = &x[hd.sorted_token[r] * K];
    for (int64_t n = 0; n < N; ++n) {
      const float* wr = &w[(hd.sorted_expert[r] * N + n) * K];
      double acc = 0, abs = 0;
      for (int64_t i = 0; i < K; ++i) {
        const double p = static_cast<double>(xr[i]) * wr[i];
        acc += p;
        abs += std::fabs(p);
      }
      ref[r * N + n] = acc;
      sum[r * N + n] = abs;
    }
  }
  for (MoeTile tile : kTiles) {
    for (DType out : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(std::string("tile height ") + std::to_string(moe_tile_rows(tile)) + ", out " + dtype_name(out));
      const DeviceTensor ys = a.alloc_tensor(out, R, N, "ys");
      poison(ys);
      moe_grouped_gemm_bf16(xs, dw, d, ys, nullptr, tile);
      const std::vector<float> got = download_f32(ys);
      EXPECT_EQ(count_bad(got, ref, sum, N, out == DType::kBF16 ? 1.0 / 256 : 0.0, 2e-5), 0);
      if (out == DType::kF32) {  // the routing weights in the epilogue
        const test::RowWeights rw = test::random_row_weights(rng, R);
        moe_grouped_gemm_bf16(xs, dw, moe_weighted(d, rw.device), ys, nullptr, tile);
        test::expect_row_weighted(download_f32(ys), got, rw, N);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeGroupedGemmTest,
    ::testing::Values(GemmCase{1, 8, 256, 136, 264, Routing::kUniform}, GemmCase{3, 8, 256, 200, 328, Routing::kUniform},
                      GemmCase{64, 8, 256, 256, 512, Routing::kUniform},
                      GemmCase{1000, 8, 256, 192, 256, Routing::kUniform},
                      GemmCase{1000, 8, 256, 136, 200, Routing::kOne},
                      GemmCase{1000, 8, 256, 136, 200, Routing::kSubset},
                      GemmCase{1, 16, 896, 104, 136, Routing::kUniform},
                      GemmCase{64, 16, 896, 120, 264, Routing::kUniform},
                      GemmCase{1000, 16, 896, 64, 128, Routing::kUniform},
                      GemmCase{40, 4, 8, 1032, 1160, Routing::kUniform},   // full-width rows, few experts
                      GemmCase{3, 8, 8, 2048, 2304, Routing::kUniform}),   // Kimi-Linear GEMM1 width
    test::CaseIndexName());

// ---- combine --------------------------------------------------------------------------------------

struct CombineCase {
  int64_t tokens, top_k, experts, cols;
  DType ys, out;
  bool accumulate;
};

class MoeCombineTest : public ::testing::TestWithParam<CombineCase> {};

TEST_P(MoeCombineTest, MatchesFloat64) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const CombineCase c = GetParam();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t T = c.tokens, k = c.top_k, E = c.experts, N = c.cols, R = T * k;
  const std::vector<int32_t> ids = make_ids(rng, T, k, E, Routing::kUniform);
  const HostDispatch hd = host_dispatch(ids, T, k, E);
  std::vector<float> ys = rng.normal(static_cast<size_t>(R * N));
  std::vector<float> old = rng.normal(static_cast<size_t>(T * N));
  if (c.ys == DType::kBF16) ys = test::round_bf16(ys);
  if (c.out == DType::kBF16) old = test::round_bf16(old);
  const std::vector<float> wts = rng.uniform(static_cast<size_t>(T * k), 0.0f, 1.0f);
  Arena& a = test::arena();
  const MoeDispatch d = alloc_dispatch(T, k, E);
  moe_dispatch(upload_ids(ids, T, k), d, nullptr);
  const DeviceTensor dys = upload_f32(a, ys.data(), R, N, c.ys, "ys");
  const DeviceTensor dw = upload_f32(a, wts.data(), T, k, DType::kF32, "weights");
  const DeviceTensor dout = upload_f32(a, old.data(), T, N, c.out, "out");
  moe_combine(dys, d, dw, dout, c.accumulate, nullptr);
  std::vector<double> ref(static_cast<size_t>(T * N)), sum(ref.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0, abs = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double p = static_cast<double>(wts[t * k + j]) * ys[hd.pick_row[t * k + j] * N + n];
        acc += p;
        abs += std::fabs(p);
      }
      if (c.accumulate) acc += old[t * N + n], abs += std::fabs(old[t * N + n]);
      ref[t * N + n] = acc;
      sum[t * N + n] = abs;
    }
  }
  EXPECT_EQ(count_bad(download_f32(dout), ref, sum, N, c.out == DType::kBF16 ? 1.0 / 256 : 0.0, 1e-5), 0);

  // The routing weights moved into GEMM 2 (moe_row_weights, moe_weighted): each sorted row gets its
  // pick's weight exactly, and the combine without weights sums the pre-weighted rows.
  float* row_weight = a.alloc_n<float>(static_cast<size_t>(R), "row weights");
  moe_row_weights(dw, d, row_weight, nullptr);
  const std::vector<float> rw = download_f32(DeviceTensor(row_weight, DType::kF32, 1, R));
  std::vector<float> ysw(ys.size());
  for (int64_t p = 0; p < T * k; ++p) {
    const int64_t r = hd.pick_row[p];
    EXPECT_EQ(rw[r], wts[p]) << "pick " << p;
    for (int64_t n = 0; n < N; ++n) ysw[r * N + n] = wts[p] * ys[r * N + n];
  }
  if (c.ys == DType::kBF16) ysw = test::round_bf16(ysw);
  const DeviceTensor dysw = upload_f32(a, ysw.data(), R, N, c.ys, "weighted ys");
  const DeviceTensor dout2 = upload_f32(a, old.data(), T, N, c.out, "out 2");
  moe_combine(dysw, d, DeviceTensor(), dout2, c.accumulate, nullptr);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = c.accumulate ? old[t * N + n] : 0.0;
      for (int64_t j = 0; j < k; ++j) acc += ysw[hd.pick_row[t * k + j] * N + n];
      ref[t * N + n] = acc;
    }
  }
  EXPECT_EQ(count_bad(download_f32(dout2), ref, sum, N, c.out == DType::kBF16 ? 1.0 / 256 : 0.0, 1e-5), 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MoeCombineTest,
                         ::testing::Values(CombineCase{1, 8, 256, 2304, DType::kBF16, DType::kBF16, false},
                                           CombineCase{64, 8, 256, 512, DType::kF32, DType::kF32, true},
                                           CombineCase{1000, 16, 896, 136, DType::kBF16, DType::kF32, false},
                                           CombineCase{3, 16, 896, 3584, DType::kF32, DType::kBF16, true}),
                         test::CaseIndexName());

// ---- end to end -----------------------------------------------------------------------------------

struct MoeCase {
  int64_t tokens, top_k, experts, hidden, inter;
  GatedActivation act;
  DType ys, out;
};

double activation(const GatedActivation& a, double g, double u) {
  const double sig = 1.0 / (1.0 + std::exp(-g));
  if (!a.situ) return g * sig * u;
  const double capped = a.beta_lin > 0 ? a.beta_lin * std::tanh(u / a.beta_lin) : u;
  return a.beta * std::tanh(g / a.beta) * sig * capped;
}

class MoeEndToEndTest : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeEndToEndTest, RoutedMoeMatchesFloat64) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const MoeCase c = GetParam();
  SCOPED_TRACE("T " + std::to_string(c.tokens) + " k " + std::to_string(c.top_k) + " E " + std::to_string(c.experts) +
               ", seed " + std::to_string(rng.seed()));
  const int64_t T = c.tokens, k = c.top_k, E = c.experts, H = c.hidden, I = c.inter, R = T * k;
  Arena& a = test::arena();
  const std::vector<float> x = rng.normal(static_cast<size_t>(T * H));
  const std::vector<float> w1 = test::round_bf16(rng.normal(static_cast<size_t>(E * 2 * I * H), 2.0f / std::sqrt(H)));
  const std::vector<float> w2 = test::round_bf16(rng.normal(static_cast<size_t>(E * H * I), 1.0f / std::sqrt(I)));
  const std::vector<float> logits = rng.normal(static_cast<size_t>(T * E), 2.0f);
  RouterParams rp;
  rp.experts = E;
  rp.top_k = k;
  rp.scaling = 2.5f;
  const DeviceTensor dids = a.alloc_tensor(DType::kI32, T, k, "ids");
  const DeviceTensor dwts = a.alloc_tensor(DType::kF32, T, k, "weights");
  moe_route(rp, upload_f32(a, logits.data(), T, E, DType::kF32, "logits"), nullptr, dids, dwts, nullptr);

  const DeviceTensor dx = upload_f32(a, x.data(), T, H, DType::kF32, "x");
  const DeviceTensor dw1 = upload_f32(a, w1.data(), E * 2 * I, H, DType::kBF16, "w1|w3");
  const DeviceTensor dw2 = upload_f32(a, w2.data(), E * H, I, DType::kBF16, "w2");
  const MoeDispatch d = alloc_dispatch(T, k, E);
  const DeviceTensor xs = a.alloc_tensor(DType::kBF16, R, H, "xs");
  const DeviceTensor gu = a.alloc_tensor(DType::kF32, R, 2 * I, "gate|up");
  const DeviceTensor hs = a.alloc_tensor(DType::kBF16, R, I, "act");
  const DeviceTensor ys = a.alloc_tensor(c.ys, R, H, "ys");
  const DeviceTensor out = a.alloc_tensor(c.out, T, H, "out");
  poison(out);
  moe_dispatch(dids, d, nullptr);
  moe_gather(dx, d, xs, nullptr);
  moe_grouped_gemm_bf16(xs, dw1, d, gu, nullptr);
  gated_activation(c.act, gu.col_slice(0, I), gu.col_slice(I, I), hs, nullptr);
  moe_grouped_gemm_bf16(hs, dw2, d, ys, nullptr);
  moe_combine(ys, d, dwts, out, false, nullptr);
  const std::vector<float> got = download_f32(out);

  const std::vector<int32_t> ids = download_i32(dids);
  const std::vector<float> wts = download_f32(dwts);
  std::vector<double> ref(static_cast<size_t>(T * H), 0.0), sum(ref.size(), 0.0), gup(static_cast<size_t>(2 * I));
  std::vector<float> h(static_cast<size_t>(I));
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> xb = test::round_bf16(std::vector<float>(x.begin() + t * H, x.begin() + (t + 1) * H));
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids[t * k + j];
      const double wt = wts[t * k + j];
      for (int64_t n = 0; n < 2 * I; ++n) {
        const float* wr = &w1[(e * 2 * I + n) * H];
        double acc = 0;
        for (int64_t i = 0; i < H; ++i) acc += static_cast<double>(xb[i]) * wr[i];
        gup[n] = acc;
      }
      for (int64_t i = 0; i < I; ++i) h[i] = test::round_bf16(static_cast<float>(activation(c.act, gup[i], gup[I + i])));
      for (int64_t n = 0; n < H; ++n) {
        const float* wr = &w2[(e * H + n) * I];
        double acc = 0, abs = 0;
        for (int64_t i = 0; i < I; ++i) {
          const double p = static_cast<double>(h[i]) * wr[i];
          acc += p;
          abs += std::fabs(p);
        }
        ref[t * H + n] += wt * acc;
        sum[t * H + n] += std::fabs(wt) * abs;
      }
    }
  }
  EXPECT_EQ(count_bad(got, ref, sum, H, c.out == DType::kBF16 ? 1.0 / 256 : 0.0, 1.0 / 64), 0);
  const test::ErrorStats st = test::compare(got, ref);
  const bool all_f32 = c.ys == DType::kF32 && c.out == DType::kF32;
  EXPECT_LT(st.rel_l2, all_f32 ? 1e-4 : 4e-3) << "max_abs " << st.max_abs;
}

GatedActivation situ() { return {true, 2.5f, 6.0f}; }

INSTANTIATE_TEST_SUITE_P(Shapes, MoeEndToEndTest,
                         ::testing::Values(MoeCase{1, 8, 256, 256, 96, {}, DType::kBF16, DType::kBF16},
                                           MoeCase{3, 8, 256, 256, 96, situ(), DType::kF32, DType::kF32},
                                           MoeCase{64, 8, 256, 512, 128, {}, DType::kBF16, DType::kF32},
                                           MoeCase{1000, 8, 256, 128, 64, situ(), DType::kBF16, DType::kBF16},
                                           MoeCase{64, 16, 896, 128, 64, {}, DType::kF32, DType::kBF16},
                                           MoeCase{300, 16, 896, 128, 64, situ(), DType::kF32, DType::kF32}),
                         test::CaseIndexName());

// ---- graph capture --------------------------------------------------------------------------------

// Dispatch + gather + grouped GEMM captured once, replayed on three routings of the same shape (tile
// counts from ~220 down to 32): nothing in the captured work depends on the counts on the host.
TEST(CudaMoe, GraphReplayWithNewIds) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t T = 64, k = 8, E = 256, N = 136, K = 264, R = T * k;
  Arena& a = test::arena();
  const std::vector<float> x = test::round_bf16(rng.normal(static_cast<size_t>(T * K)));
  const std::vector<float> w = test::round_bf16(rng.normal(static_cast<size_t>(E * N * K)));
  const DeviceTensor dx = upload_f32(a, x.data(), T, K, DType::kBF16, "x");
  const DeviceTensor dw = upload_f32(a, w.data(), E * N, K, DType::kBF16, "w");
  const DeviceTensor ids = a.alloc_tensor(DType::kI32, T, k, "ids");
  const DeviceTensor xs = a.alloc_tensor(DType::kBF16, R, K, "xs");
  const DeviceTensor ys = a.alloc_tensor(DType::kF32, R, N, "ys");
  const MoeDispatch d = alloc_dispatch(T, k, E);
  Stream stream;
  Graph graph(stream, [&](cudaStream_t s) {
    moe_dispatch(ids, d, s);
    moe_gather(dx, d, xs, s);
    moe_grouped_gemm_bf16(xs, dw, d, ys, s);
  });
  for (Routing routing : {Routing::kUniform, Routing::kOne, Routing::kSubset}) {
    const std::vector<int32_t> h_ids = make_ids(rng, T, k, E, routing);
    const HostDispatch hd = host_dispatch(h_ids, T, k, E);
    copy_bytes_to_device(ids.data, h_ids.data(), h_ids.size() * sizeof(int32_t));
    poison(ys);
    graph.launch(stream);
    stream.sync();
    EXPECT_EQ(download_ints(d.pick_row, R), hd.pick_row);
    std::vector<double> ref(static_cast<size_t>(R * N)), sum(ref.size());
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t n = 0; n < N; ++n) {
        const float* xr = &x[hd.sorted_token[r] * K];
        const float* wr = &w[(hd.sorted_expert[r] * N + n) * K];
        double acc = 0, abs = 0;
        for (int64_t i = 0; i < K; ++i) acc += static_cast<double>(xr[i]) * wr[i], abs += std::fabs(double{xr[i]} * wr[i]);
        ref[r * N + n] = acc;
        sum[r * N + n] = abs;
      }
    }
    EXPECT_EQ(count_bad(download_f32(ys), ref, sum, N, 0.0, 2e-5), 0) << "routing " << static_cast<int>(routing);
  }
}

TEST(CudaMoe, TileChoiceAndErrors) {
  EXPECT_EQ(moe_tile_for(8, 256), MoeTile::kM16);       // decode
  EXPECT_EQ(moe_tile_for(32768, 256), MoeTile::kM128);  // prefill, 128 rows per expert
  EXPECT_THROW(moe_tile_rows(MoeTile::kAuto), Error);
  EXPECT_THROW(moe_dispatch_view(nullptr, 4, 0, 8), Error);
}

}  // namespace
}  // namespace k3::cuda
