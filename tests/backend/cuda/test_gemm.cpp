// cuBLASLt GEMMs against float64 products of the operands the GPU actually multiplies (bf16 values,
// or the dequantised FP8 codes × scales), on fresh random inputs.
//
// Tolerance: the output is bf16, so each element carries up to half a bf16 step (2^-9 relative) of
// rounding; the fp32 accumulation (for FP8 on Hopper: reduced-precision tensor-core sums promoted
// to fp32 at every 128-block of K) adds far less, ~1e-4 of the output's rms. Bound per element:
// |y − ref| ≤ 8e-3·|ref| + 4e-3·rms(ref), and ‖y − ref‖/‖ref‖ ≤ 5e-3. A wrong scale layout (e.g.
// K-contiguous activation scales, unpadded weight scales) mixes blocks whose magnitudes differ by
// up to 2^8 here and misses these bounds by orders of magnitude.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <thread>

#include "backend/cuda/core/check.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/ops/ops.h"
#include "quant/formats/fp8/cuda/fp8_quant.h"
#include "backend/cuda/core/stream.h"
#include "backend/cuda/core/upload.h"
#include "core/numeric.h"
#include "cuda_test_util.h"
#include "quant/formats/fp8/fp8.h"

namespace k3::cuda {
namespace {

// ref[m][n] = Σ_k x[m][k]·w[n][k] in float64, threads over rows of n.
std::vector<double> matmul_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t N, int64_t K) {
  std::vector<double> ref(static_cast<size_t>(M * N));
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int64_t n = t; n < N; n += threads) {
        for (int64_t m = 0; m < M; ++m) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(x[m * K + k]) * w[n * K + k];
          ref[m * N + n] = acc;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  return ref;
}

void expect_close(const std::vector<float>& y, const std::vector<double>& ref) {
  const test::ErrorStats st = test::compare(y, ref);
  EXPECT_EQ(st.non_finite, 0);
  EXPECT_LE(st.rel_l2, 5e-3);
  EXPECT_EQ(test::count_outside(y, ref, 8e-3, 4e-3 * st.ref_rms), 0)
      << "rel_l2 " << st.rel_l2 << " max_abs " << st.max_abs << " ref rms " << st.ref_rms;
}

// Matrix whose 128×128 tiles (rows × cols) have magnitudes 2^[-4, 4].
std::vector<float> tiled(test::Rng& rng, int64_t rows, int64_t cols, int64_t tile_rows) {
  std::vector<float> v = rng.normal(static_cast<size_t>(rows * cols));
  for (int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
    for (int64_t c0 = 0; c0 < cols; c0 += 128) {
      const float s = std::ldexp(1.0f, rng.uniform_int(-4, 4));
      for (int64_t r = r0; r < std::min(rows, r0 + tile_rows); ++r) {
        for (int64_t c = c0; c < std::min(cols, c0 + 128); ++c) v[r * cols + c] *= s;
      }
    }
  }
  return v;
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;  // M, N, K

// When the block-scaled GEMM misses its reference, report how close it comes to the products that
// plausible misreadings of the two scale buffers would give: that names the layout cuBLASLt wants.
void diagnose_scale_layouts(const std::vector<float>& y, const std::vector<uint8_t>& xq, const std::vector<float>& xs,
                            const std::vector<uint8_t>& wq, const std::vector<float>& ws, int64_t M, int64_t N,
                            int64_t K) {
  const int64_t kb = (K + 127) / 128, nb = (N + 127) / 128, ld = fp8_block_scale_ld(K);
  std::vector<float> xbuf(static_cast<size_t>(kb * M)), wbuf(static_cast<size_t>(nb * ld), 0.0f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < kb; ++b) xbuf[b * M + m] = xs[m * kb + b];  // as quantize_fp8_1x128 writes
  for (int64_t n = 0; n < nb; ++n)
    for (int64_t b = 0; b < kb; ++b) wbuf[n * ld + b] = ws[n * kb + b];  // as upload_fp8_block_weight packs
  using Read = std::function<float(int64_t, int64_t)>;
  const Read x_ours = [&](int64_t m, int64_t b) { return xbuf[b * M + m]; };
  const Read x_kcontig = [&](int64_t m, int64_t b) { return xbuf[m * kb + b]; };
  const Read w_ours = [&](int64_t n, int64_t b) { return wbuf[n * ld + b]; };
  const Read w_unpadded = [&](int64_t n, int64_t b) { return wbuf[n * kb + b]; };
  const Read w_ncontig = [&](int64_t n, int64_t b) { return wbuf[b * nb + n]; };
  auto try_layout = [&](const char* name, const Read& rx, const Read& rw) {
    std::vector<float> xd(static_cast<size_t>(M * K)), wd(static_cast<size_t>(N * K));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) xd[m * K + k] = decode_e4m3fn(xq[m * K + k]) * rx(m, k / 128);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) wd[n * K + k] = decode_e4m3fn(wq[n * K + k]) * rw(n / 128, k / 128);
    std::printf("  layout %-40s rel_l2 %.3g\n", name, test::compare(y, matmul_ref(xd, wd, M, N, K)).rel_l2);
  };
  std::printf("scale layout diagnosis (M=%lld N=%lld K=%lld):\n", static_cast<long long>(M), static_cast<long long>(N),
              static_cast<long long>(K));
  try_layout("x token-contiguous, w padded (ours)", x_ours, w_ours);
  try_layout("x K-contiguous, w padded", x_kcontig, w_ours);
  try_layout("x token-contiguous, w unpadded", x_ours, w_unpadded);
  try_layout("x K-contiguous, w unpadded", x_kcontig, w_unpadded);
  try_layout("x token-contiguous, w N-contiguous", x_ours, w_ncontig);
  try_layout("x K-contiguous, w N-contiguous", x_kcontig, w_ncontig);
}

class GemmBf16Test : public ::testing::TestWithParam<Shape> {};

TEST_P(GemmBf16Test, MatchesFloat64) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const auto [M, N, K] = GetParam();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const std::vector<float> x = test::round_bf16(rng.normal(static_cast<size_t>(M * K)));
  const std::vector<float> w = test::round_bf16(rng.normal(static_cast<size_t>(N * K), 0.05f));
  Arena& a = test::arena();
  Blas blas(a);
  const DeviceTensor dx = upload_f32(a, x.data(), M, K, DType::kBF16, "x");
  const DeviceTensor dw = upload_f32(a, w.data(), N, K, DType::kBF16, "w");
  const DeviceTensor dy = a.alloc_tensor(DType::kBF16, M, N, "y");
  poison(dy);
  blas.bf16(dx, dw, dy, nullptr);
  expect_close(download_f32(dy), matmul_ref(x, w, M, N, K));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmBf16Test,
                         ::testing::Values(Shape{1, 576, 1152}, Shape{8, 1536, 512}, Shape{100, 576, 1152},
                                           Shape{257, 384, 2048}));

class GemmFp8BlockTest : public ::testing::TestWithParam<Shape> {};

TEST_P(GemmFp8BlockTest, FusedQuantAndGemmMatchFloat64) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const auto [M, N, K] = GetParam();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  // The checkpoint side: float weights quantised by the producer rule with 128×128 tiles.
  const std::vector<float> w = tiled(rng, N, K, 128);
  const int64_t nb = (N + 127) / 128, kb = (K + 127) / 128;
  std::vector<uint8_t> wq(static_cast<size_t>(N * K));
  std::vector<float> ws(static_cast<size_t>(nb * kb));
  quantize_fp8_block(w.data(), N, K, 128, 128, wq.data(), ws.data());
  std::vector<float> w_deq(w.size());
  dequant_fp8_block(wq.data(), ws.data(), N, K, 128, 128, w_deq.data());
  // The activation side: bf16, quantised on the GPU; its exact codes are checked elsewhere
  // (test_fp8_quant), so the reference applies the same producer rule on the CPU.
  const std::vector<float> x = test::round_bf16(tiled(rng, M, K, 1));
  std::vector<uint8_t> xq(static_cast<size_t>(M * K));
  std::vector<float> xs(static_cast<size_t>(M * kb));
  quantize_fp8_block(x.data(), M, K, 1, 128, xq.data(), xs.data());
  std::vector<float> x_deq(x.size());
  dequant_fp8_block(xq.data(), xs.data(), M, K, 1, 128, x_deq.data());

  Arena& a = test::arena();
  Blas blas(a);
  const Fp8BlockWeight dw = upload_fp8_block_weight(a, wq.data(), ws.data(), N, K, "w");
  const DeviceTensor dx = upload_f32(a, x.data(), M, K, DType::kBF16, "x");
  const DeviceTensor dy = a.alloc_tensor(DType::kBF16, M, N, "y");
  poison(dy);
  linear_fp8_pb_wo(blas, a, dx, dw, dy, nullptr);
  const std::vector<float> y = download_f32(dy);
  expect_close(y, matmul_ref(x_deq, w_deq, M, N, K));
  if (HasFailure()) diagnose_scale_layouts(y, xq, xs, wq, ws, M, N, K);

  // The same product replayed from a CUDA graph gives the same numbers.
  Stream stream;
  const DeviceTensor dy2 = a.alloc_tensor(DType::kBF16, M, N, "y2");
  poison(dy2);
  Graph graph(stream, [&](cudaStream_t s) { linear_fp8_pb_wo(blas, a, dx, dw, dy2, s); });
  graph.launch(stream);
  stream.sync();
  const std::vector<float> y2 = download_f32(dy2);
  int64_t differ = 0;
  for (size_t i = 0; i < y.size(); ++i) differ += !(std::fabs(y2[i] - y[i]) <= std::fabs(y[i]) / 128);
  EXPECT_EQ(differ, 0);

  // An output with the padded row count takes the copy-free path; its first M rows are the same.
  const int64_t Mp = fp8_block_padded_rows(M);
  const DeviceTensor dyp = a.alloc_tensor(DType::kBF16, Mp, N, "y padded");
  poison(dyp);
  linear_fp8_pb_wo(blas, a, dx, dw, dyp, nullptr);
  const std::vector<float> yp = download_f32(dyp);
  differ = 0;
  for (size_t i = 0; i < y.size(); ++i) differ += !(std::fabs(yp[i] - y[i]) <= std::fabs(y[i]) / 128);
  EXPECT_EQ(differ, 0);
  const DeviceTensor wrong = a.alloc_tensor(DType::kBF16, M + 1 == Mp ? M + 2 : M + 1, N, "y wrong");
  EXPECT_THROW(linear_fp8_pb_wo(blas, a, dx, dw, wrong, nullptr), Error);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmFp8BlockTest,
                         ::testing::Values(Shape{1, 576, 1152},    // K-blocks 9: padded weight-scale rows
                                           Shape{5, 384, 1536},    // q_b-like K
                                           Shape{64, 640, 1152}, Shape{200, 1024, 2048},
                                           Shape{3, 18432, 1536},  // Kimi-K3 q_b, decode
                                           Shape{129, 256, 7168}));

TEST(CudaGemm, Fp8PerTensorMatchesFloat64) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t M = 37, N = 640, K = 1024;
  const std::vector<float> x = rng.normal(static_cast<size_t>(M * K), 3.0f);
  const std::vector<float> w = rng.normal(static_cast<size_t>(N * K), 0.02f);
  float x_amax = 0, w_amax = 0;
  for (float v : x) x_amax = std::max(x_amax, std::fabs(v));
  for (float v : w) w_amax = std::max(w_amax, std::fabs(v));
  const float sx = x_amax / 448.0f, sw = w_amax / 448.0f;
  std::vector<uint8_t> wq(w.size());
  std::vector<float> w_deq(w.size()), x_deq(x.size());
  for (size_t i = 0; i < w.size(); ++i) {
    wq[i] = encode_e4m3fn_sat(w[i] / sw);
    w_deq[i] = decode_e4m3fn(wq[i]) * sw;
  }
  for (size_t i = 0; i < x.size(); ++i) x_deq[i] = decode_e4m3fn(encode_e4m3fn_sat(x[i] / sx)) * sx;

  Arena& a = test::arena();
  Blas blas(a);
  const Fp8TensorWeight dw = upload_fp8_tensor_weight(a, wq.data(), sw, N, K, "w");
  const DeviceTensor dx = upload_f32(a, x.data(), M, K, DType::kF32, "x");
  const DeviceTensor dsx = upload_f32(a, &sx, 1, 1, DType::kF32, "input_scale");
  const DeviceTensor dy = a.alloc_tensor(DType::kBF16, M, N, "y");
  poison(dy);
  linear_fp8_tensor(blas, a, dx, dsx.as<float>(), dw, dy, nullptr);
  expect_close(download_f32(dy), matmul_ref(x_deq, w_deq, M, N, K));
}

TEST(CudaGemm, PlansAreCachedPerShape) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  Arena& a = test::arena();
  Blas blas(a);
  const DeviceTensor x = a.alloc_tensor(DType::kBF16, 4, 256, "x");
  const DeviceTensor w = a.alloc_tensor(DType::kBF16, 128, 256, "w");
  const DeviceTensor y = a.alloc_tensor(DType::kBF16, 4, 128, "y");
  K3_CUDA_CHECK(cudaMemset(x.data, 0, x.bytes()));
  K3_CUDA_CHECK(cudaMemset(w.data, 0, w.bytes()));
  blas.bf16(x, w, y, nullptr);
  blas.bf16(x, w, y, nullptr);
  EXPECT_EQ(blas.plan_count(), 1u);
  blas.bf16(x.row_slice(0, 2), w, y.row_slice(0, 2), nullptr);
  EXPECT_EQ(blas.plan_count(), 2u);
  K3_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_THROW(blas.bf16(x, w, x, nullptr), Error);  // output shape
  const DeviceTensor wf = a.alloc_tensor(DType::kF32, 128, 256, "wf");
  EXPECT_THROW(blas.bf16(x, wf, y, nullptr), Error);  // dtype
}

}  // namespace
}  // namespace k3::cuda
