// RMSNorm and the AttnRes mix + RMSNorm against the CPU backend (cpu::rms_norm and
// cpu::attn_res_mix_norm, which reduce in float64) on fresh random inputs.
//
// Tolerances: the GPU reduces in fp32 (tree order), so the sums carry a relative error of a few
// 1e-7 for n <= 7168, and every output element goes through 2–3 fp32 roundings: f32 outputs are
// held to 2e-6 relative (+1e-6·rms absolute for values near zero). bf16 outputs may differ from the
// rounded reference by one bf16 step where the fp32 value sits near a rounding boundary: 2^-8
// relative. The AttnRes softmax turns a score error δ into a relative weight error of about δ; with
// scores of O(1..10) and fp32 dot products over 7168 terms (δ ≲ 1e-5) the f32 bound is 2e-5.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/ops/ops_tuning.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"

namespace k3::cuda {
namespace {

struct NormCase {
  int64_t rows, n;
  DType in, out;
};

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double rel_tol(DType out, double f32_tol) { return out == DType::kBF16 ? 1.0 / 256 : f32_tol; }

class RmsNormTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(RmsNormTest, MatchesCpu) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const auto [rows, n, tin, tout] = GetParam();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Tensor x(rows, n);
  x.data = rng.normal(static_cast<size_t>(rows * n), 3.0f);
  // Rows of very different magnitudes: the norm must not mix rows.
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::ldexp(1.0f, rng.uniform_int(-6, 6));
    for (int64_t i = 0; i < n; ++i) x.row(r)[i] *= s;
  }
  if (tin == DType::kBF16) x.data = test::round_bf16(x.data);
  const Floats w = rng.uniform(static_cast<size_t>(n), 0.5f, 1.5f);
  const double eps = 1e-5;
  Tensor ref;
  cpu::rms_norm(x, w, eps, ref);

  Arena& a = test::arena();
  const DeviceTensor dx = upload_f32(a, x.data.data(), rows, n, tin, "x");
  const DeviceTensor dw = upload_f32(a, w.data(), 1, n, DType::kF32, "w");
  const DeviceTensor dy = a.alloc_tensor(tout, rows, n, "y");
  poison(dy);
  rms_norm(dx, dw.as<float>(), static_cast<float>(eps), dy, nullptr);
  const std::vector<float> y = download_f32(dy);
  const std::vector<double> r = to_double(ref.data);
  const test::ErrorStats st = test::compare(y, r);
  EXPECT_EQ(st.non_finite, 0);
  // Per element, relative to the row's own scale (rows differ by up to 2^12).
  int64_t bad = 0;
  for (int64_t t = 0; t < rows; ++t) {
    double rms = 0;
    for (int64_t i = 0; i < n; ++i) rms += r[t * n + i] * r[t * n + i];
    rms = std::sqrt(rms / n);
    for (int64_t i = 0; i < n; ++i) {
      const double d = std::fabs(y[t * n + i] - r[t * n + i]);
      if (!(d <= rel_tol(tout, 2e-6) * std::fabs(r[t * n + i]) + 1e-6 * rms)) ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << "rel_l2 " << st.rel_l2 << " max_abs " << st.max_abs;
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(NormCase{1, 7168, DType::kBF16, DType::kBF16},
                                           NormCase{37, 7168, DType::kF32, DType::kF32},
                                           NormCase{64, 7168, DType::kBF16, DType::kF32},
                                           NormCase{5, 1536, DType::kF32, DType::kBF16},
                                           NormCase{300, 512, DType::kBF16, DType::kBF16},
                                           NormCase{3, 32768, DType::kF32, DType::kF32},
                                           NormCase{9, 8, DType::kF32, DType::kF32}), test::CaseIndexName());

class AttnResTest : public ::testing::TestWithParam<std::tuple<int, int64_t, DType, DType, int64_t>> {};

TEST_P(AttnResTest, MatchesCpu) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const auto [count, rows, tin, tout, n] = GetParam();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const double eps = 1e-5;
  std::vector<Tensor> cand(static_cast<size_t>(count), Tensor(rows, n));
  for (Tensor& t : cand) {
    // Candidates of different scales, as block sums of different lengths are.
    t.data = rng.normal(static_cast<size_t>(rows * n), std::ldexp(1.0f, rng.uniform_int(-2, 4)));
    if (tin == DType::kBF16) t.data = test::round_bf16(t.data);
  }
  // c = norm ⊙ proj; scaled so the scores are O(1..10) and the softmax really mixes.
  const Floats c = rng.normal(static_cast<size_t>(n), 3.0f / std::sqrt(static_cast<float>(n)));
  const Floats norm_w = rng.uniform(static_cast<size_t>(n), 0.5f, 1.5f);
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : cand) ptrs.push_back(&t);
  Tensor ref;
  cpu::attn_res_mix_norm(ptrs, c, norm_w, eps, ref);

  Arena& a = test::arena();
  std::vector<DeviceTensor> dc;
  for (const Tensor& t : cand) dc.push_back(upload_f32(a, t.data.data(), rows, n, tin, "candidate"));
  const DeviceTensor dcv = upload_f32(a, c.data(), 1, n, DType::kF32, "c");
  const DeviceTensor dnw = upload_f32(a, norm_w.data(), 1, n, DType::kF32, "norm_w");
  const DeviceTensor dy = a.alloc_tensor(tout, rows, n, "y");
  const std::vector<double> r = to_double(ref.data);
  for (AttnResAlgo algo : {AttnResAlgo::kOnePass, AttnResAlgo::kTwoPass}) {
    SCOPED_TRACE(algo == AttnResAlgo::kOnePass ? "one pass" : "two pass");
    poison(dy);
    attn_res_mix_norm(dc, dcv.as<float>(), dnw.as<float>(), static_cast<float>(eps), dy, nullptr, algo);
    const std::vector<float> y = download_f32(dy);
    const test::ErrorStats st = test::compare(y, r);
    EXPECT_EQ(st.non_finite, 0);
    EXPECT_EQ(test::count_outside(y, r, rel_tol(tout, 2e-5), 2e-5 * st.ref_rms), 0)
        << "rel_l2 " << st.rel_l2 << " max_abs " << st.max_abs;
  }
}

INSTANTIATE_TEST_SUITE_P(Candidates, AttnResTest,
                         ::testing::Values(std::make_tuple(1, 4, DType::kF32, DType::kF32, 7168),
                                           std::make_tuple(2, 3, DType::kBF16, DType::kBF16, 7168),
                                           std::make_tuple(9, 33, DType::kBF16, DType::kF32, 7168),
                                           std::make_tuple(9, 2, DType::kF32, DType::kBF16, 7168),
                                           std::make_tuple(16, 5, DType::kF32, DType::kF32, 7168),
                                           std::make_tuple(5, 7, DType::kBF16, DType::kBF16, 1000),
                                           // more rows than resident CTAs: each streams several rows
                                           std::make_tuple(9, 600, DType::kBF16, DType::kBF16, 7168),
                                           std::make_tuple(3, 500, DType::kF32, DType::kF32, 1000),
                                           // wider than the one-pass kernel takes: falls back
                                           std::make_tuple(3, 2, DType::kBF16, DType::kF32, 12288)));

TEST(CudaNorm, RejectsBadShapes) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  Arena& a = test::arena();
  const DeviceTensor x = a.alloc_tensor(DType::kF32, 2, 12, "x");
  const DeviceTensor y = a.alloc_tensor(DType::kF32, 2, 12, "y");
  float* w = a.alloc_n<float>(12, "w");
  EXPECT_THROW(rms_norm(x, w, 1e-5f, y, nullptr), Error);  // 12 % 8 != 0
  const DeviceTensor x16 = a.alloc_tensor(DType::kF32, 2, 16, "x16");
  EXPECT_THROW(rms_norm(x16, w, 1e-5f, y, nullptr), Error);  // shape mismatch
  std::vector<DeviceTensor> none;
  EXPECT_THROW(attn_res_mix_norm(none, w, w, 1e-5f, x16, nullptr), Error);
}

}  // namespace
}  // namespace k3::cuda
