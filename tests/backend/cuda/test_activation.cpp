// SiLU- and SiTU-gated activation against a float64 evaluation of the CPU formula (spec §2.1,
// backend/cpu/moe.cpp gated_activation) on fresh random inputs.
//
// Tolerance: the GPU evaluates in fp32 — SiLU with expf (≤ 2 ulp) and 3 roundings; SiTU with
// ex2.approx, rcp.approx and a polynomial tanh near 0 (≤ 2 ulp each, activation.cu) and ~8
// roundings: |out − ref| ≤ 2e-6·|ref| + 1e-7·rms for f32 output. bf16 output: 2^-8 relative (half a
// bf16 step plus the fp32 error). Each case records the largest error as a fraction of its
// tolerance ("tolerance_used", gtest's --gtest_output=json); H200, 2026-11-29: ≤ 0.21 for the SiTU
// cases with f32 output, 0.08 for SiLU; ≈ 0.99 with bf16 output (the rounding to bf16 itself).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/ops/ops.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"
#include "model/config.h"

namespace k3::cuda {
namespace {

double reference(const GatedActivation& a, double gate, double up) {
  const double g = gate * static_cast<double>(a.gate_alpha), u = up * static_cast<double>(a.up_alpha);
  const double sig = 1.0 / (1.0 + std::exp(-g));
  if (!a.situ) return g * sig * u;
  const double capped = a.beta_lin > 0 ? a.beta_lin * std::tanh(u / a.beta_lin) : u;
  return a.beta * std::tanh(g / a.beta) * sig * capped;
}

struct ActCase {
  GatedActivation act;
  DType in, out;
  bool fused;  // gate and up as the two halves of one [rows, 2·cols] buffer
};

class GatedActivationTest : public ::testing::TestWithParam<ActCase> {};

TEST_P(GatedActivationTest, MatchesFloat64) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const ActCase c = GetParam();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t rows = 37, cols = 3072;
  // Wide range: SiTU's caps (β, β_lin) must bite on part of the inputs.
  std::vector<float> gate = rng.normal(static_cast<size_t>(rows * cols), 4.0f);
  std::vector<float> up = rng.normal(static_cast<size_t>(rows * cols), 4.0f);
  if (c.in == DType::kBF16) {
    gate = test::round_bf16(gate);
    up = test::round_bf16(up);
  }
  Arena& a = test::arena();
  DeviceTensor dg, du;
  if (c.fused) {
    std::vector<float> both(static_cast<size_t>(rows * 2 * cols));
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(gate.begin() + r * cols, cols, both.begin() + r * 2 * cols);
      std::copy_n(up.begin() + r * cols, cols, both.begin() + r * 2 * cols + cols);
    }
    const DeviceTensor d = upload_f32(a, both.data(), rows, 2 * cols, c.in, "gate|up");
    dg = d.col_slice(0, cols);
    du = d.col_slice(cols, cols);
  } else {
    dg = upload_f32(a, gate.data(), rows, cols, c.in, "gate");
    du = upload_f32(a, up.data(), rows, cols, c.in, "up");
  }
  const DeviceTensor dout = a.alloc_tensor(c.out, rows, cols, "out");
  poison(dout);
  gated_activation(c.act, dg, du, dout, nullptr);
  const std::vector<float> out = download_f32(dout);
  std::vector<double> ref(out.size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = reference(c.act, gate[i], up[i]);
  const test::ErrorStats st = test::compare(out, ref);
  EXPECT_EQ(st.non_finite, 0);
  const double rel = c.out == DType::kBF16 ? 1.0 / 256 : 2e-6;
  EXPECT_EQ(test::count_outside(out, ref, rel, 1e-7 * st.ref_rms), 0)
      << "rel_l2 " << st.rel_l2 << " max_abs " << st.max_abs;
  double used = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    used = std::max(used, std::fabs(out[i] - ref[i]) / (rel * std::fabs(ref[i]) + 1e-7 * st.ref_rms));
  }
  RecordProperty("tolerance_used", std::to_string(used));
}

GatedActivation silu() { return {}; }
GatedActivation situ(float beta, float beta_lin, float ga = 1.0f, float ua = 1.0f) {
  return {true, beta, beta_lin, ga, ua};
}

INSTANTIATE_TEST_SUITE_P(Kinds, GatedActivationTest,
                         ::testing::Values(ActCase{silu(), DType::kF32, DType::kF32, false},
                                           ActCase{silu(), DType::kBF16, DType::kBF16, true},
                                           ActCase{situ(2.5f, 0.0f), DType::kF32, DType::kF32, false},
                                           ActCase{situ(2.5f, 4.0f), DType::kF32, DType::kF32, true},
                                           ActCase{situ(1.0f, 3.0f), DType::kBF16, DType::kF32, false},
                                           ActCase{situ(3.0f, 6.0f), DType::kF32, DType::kBF16, true},
                                           // per-tensor alphas applied before the tanh
                                           ActCase{situ(2.5f, 4.0f, 0.37f, 2.9f), DType::kBF16, DType::kF32, true}), test::CaseIndexName());

TEST(CudaActivation, ParamsFromConfig) {
  ActivationConfig a;
  EXPECT_FALSE(gated_activation_params(a).situ);
  a.kind = Activation::kSitu;
  a.situ_beta = 2.0;
  EXPECT_TRUE(gated_activation_params(a).situ);
  EXPECT_EQ(gated_activation_params(a).beta, 2.0f);
  EXPECT_EQ(gated_activation_params(a).beta_lin, 0.0f);
  a.situ_linear_beta = 5.0;
  EXPECT_EQ(gated_activation_params(a).beta_lin, 5.0f);
}

}  // namespace
}  // namespace k3::cuda
