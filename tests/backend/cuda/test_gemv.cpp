// gemv_bf16 (the small-M bf16 GEMM of the decode path) against a float64 product of the same bf16
// values, on fresh random inputs: every row count 1…8, K with and without a tail of the 1024-column
// step, odd N, strided x and y, f32 and bf16 output; and its one-line errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cuda/core/check.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"

namespace k3::cuda {
namespace {

struct GemvCase {
  int64_t m, n, k;
  DType out;
};

class GemvTest : public ::testing::TestWithParam<GemvCase> {};

TEST_P(GemvTest, MatchesFloat64) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const GemvCase c = GetParam();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Arena& a = test::arena();
  const std::vector<float> x = test::round_bf16(rng.normal(static_cast<size_t>(c.m * c.k)));
  const std::vector<float> w = test::round_bf16(rng.normal(static_cast<size_t>(c.n * c.k), 0.05f));
  // x and y as column windows of wider matrices: the kernel must honour the leading dimensions.
  const DeviceTensor x_wide = a.alloc_tensor(DType::kBF16, c.m, c.k + 16, "x wide");
  const DeviceTensor dx = x_wide.col_slice(8, c.k);
  const DeviceTensor x_packed = upload_f32(a, x.data(), c.m, c.k, DType::kBF16, "x");
  K3_CUDA_CHECK(cudaMemcpy2D(dx.data, dx.ld * 2, x_packed.data, c.k * 2, c.k * 2, c.m, cudaMemcpyDeviceToDevice));
  const DeviceTensor dw = upload_f32(a, w.data(), c.n, c.k, DType::kBF16, "w");
  const DeviceTensor y_wide = a.alloc_tensor(c.out, c.m, c.n + 3, "y wide");
  const DeviceTensor dy = y_wide.col_slice(1, c.n);
  gemv_bf16(dx, dw, dy, nullptr);
  K3_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> wide = download_f32(y_wide);  // download_f32 takes contiguous tensors
  std::vector<float> got(static_cast<size_t>(c.m * c.n));
  for (int64_t m = 0; m < c.m; ++m) {
    std::copy_n(wide.begin() + m * (c.n + 3) + 1, c.n, got.begin() + m * c.n);
  }

  std::vector<double> want(static_cast<size_t>(c.m * c.n)), scale(want.size());
  for (int64_t m = 0; m < c.m; ++m) {
    for (int64_t n = 0; n < c.n; ++n) {
      double s = 0, sa = 0;
      for (int64_t k = 0; k < c.k; ++k) {
        const double p = static_cast<double>(x[m * c.k + k]) * w[n * c.k + k];
        s += p;
        sa += std::fabs(p);
      }
      want[m * c.n + n] = s;
      scale[m * c.n + n] = sa;
    }
  }
  // fp32 accumulation: a few ulps of Σ|x·w|; bf16 output adds half a bf16 step of the result.
  const double out_rel = c.out == DType::kBF16 ? 1.0 / 256 : 0.0;
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = 1e-5 * scale[i] + out_rel * std::fabs(want[i]) + 1e-30;
    if (!(std::fabs(got[i] - want[i]) <= tol) && ++bad <= 5) {
      ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << want[i] << " (tol " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvTest,
                         ::testing::Values(GemvCase{1, 4096, 2304, DType::kBF16}, GemvCase{2, 37, 1040, DType::kF32},
                                           GemvCase{3, 129, 8, DType::kBF16}, GemvCase{4, 256, 7168, DType::kF32},
                                           GemvCase{5, 64, 1536, DType::kBF16}, GemvCase{6, 7, 4104, DType::kF32},
                                           GemvCase{7, 100, 512, DType::kBF16}, GemvCase{8, 1000, 2304, DType::kF32}),
                         test::CaseIndexName());

TEST(GemvErrors, OneLineMessages) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  Arena& a = test::arena();
  const DeviceTensor w = a.alloc_tensor(DType::kBF16, 16, 64, "w");
  const DeviceTensor y = a.alloc_tensor(DType::kF32, 9, 16, "y");
  const DeviceTensor x9 = a.alloc_tensor(DType::kBF16, 9, 64, "x");
  EXPECT_THROW(gemv_bf16(x9, w, y, nullptr), Error);  // more rows than kGemvMaxRows
  const DeviceTensor xf = a.alloc_tensor(DType::kF32, 1, 64, "x f32");
  EXPECT_THROW(gemv_bf16(xf, w, y.row_slice(0, 1), nullptr), Error);  // x dtype
  const DeviceTensor x_odd = a.alloc_tensor(DType::kBF16, 1, 60, "x odd");
  const DeviceTensor w_odd = a.alloc_tensor(DType::kBF16, 16, 60, "w odd");
  EXPECT_THROW(gemv_bf16(x_odd, w_odd, y.row_slice(0, 1), nullptr), Error);  // K % 8
}

}  // namespace
}  // namespace k3::cuda
