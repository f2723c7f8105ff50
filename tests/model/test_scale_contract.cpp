// The MoE scale contract (quant-formats §3.4) on an NVFP4 SiTU expert whose w1/w3 share a
// non-unit weight_scale_2: GEMM1's α (gate and up) is applied exactly once, before SiTU's tanh,
// and only GEMM2's own α after it. The engine's expert (cpu::gated_mlp) must match a float64
// reference of the dequantised weights; the two classic bugs — the up α applied twice (folded into
// the output scale as for SwiGLU) or forgotten — must land far outside that tolerance, which shows
// this test would fail on either.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/ops.h"
#include "quant/formats/nvfp4/cpu/nvfp4_matrix.h"
#include "quant/formats/nvfp4/nvfp4.h"

namespace k3::cpu {
namespace {

struct Nvfp4Weight {
  std::vector<uint8_t> packed, scales;
  std::vector<float> dequant;  // exact reference values (α included)
  float global;
  int64_t n, k;
};

Nvfp4Weight quantize(int64_t n, int64_t k, float global, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = d(rng);
  Nvfp4Weight q{std::vector<uint8_t>(n * k / 2), std::vector<uint8_t>(n * k / 16), std::vector<float>(n * k), global, n, k};
  quantize_nvfp4(w.data(), n, k, global, q.packed.data(), q.scales.data());
  dequant_nvfp4(q.packed.data(), q.scales.data(), global, n, k, q.dequant.data());
  return q;
}

std::unique_ptr<CpuLinear> linear_of(const Nvfp4Weight& w) {
  return make_kernel_linear(make_nvfp4_matrix(w.packed, w.scales, w.global, w.n, w.k, selected_isa()));
}

double situ(double g, double u, double beta, double beta_lin) {
  return beta * std::tanh(g / beta) / (1.0 + std::exp(-g)) * beta_lin * std::tanh(u / beta_lin);
}

TEST(MoeScaleContract, SituSeesDequantisedGateAndUpExactlyOnce) {
  const int64_t hidden = 128, inter = 64, tokens = 3;
  // ModelOpt's rule gives w1 and w3 one shared weight_scale_2 (here amax/(6·448) of a 0.5-σ matrix);
  // w2 its own.
  const float shared_s2 = nvfp4_global_scale(2.0f), down_s2 = nvfp4_global_scale(1.5f);
  ASSERT_LT(shared_s2, 0.01f);
  const Nvfp4Weight w1 = quantize(inter, hidden, shared_s2, 1), w3 = quantize(inter, hidden, shared_s2, 2);
  const Nvfp4Weight w2 = quantize(hidden, inter, down_s2, 3);
  auto gate = linear_of(w1), up = linear_of(w3), down = linear_of(w2);
  ASSERT_FLOAT_EQ(up->output_scale(), shared_s2);

  ActivationConfig act;
  act.kind = Activation::kSitu;
  act.situ_beta = 4.0;
  act.situ_linear_beta = 25.0;

  Tensor x(tokens, hidden);
  std::mt19937 rng(4);
  std::normal_distribution<float> d(0.0f, 3.0f);  // pre-activations reach SiTU's non-linear range
  for (float& v : x.data) v = d(rng);

  // float64 reference on the exact dequantised weights.
  std::vector<double> want(tokens * hidden, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> h(inter);
    for (int64_t i = 0; i < inter; ++i) {
      double g = 0, u = 0;
      for (int64_t c = 0; c < hidden; ++c) {
        g += static_cast<double>(w1.dequant[i * hidden + c]) * x.row(t)[c];
        u += static_cast<double>(w3.dequant[i * hidden + c]) * x.row(t)[c];
      }
      h[i] = situ(g, u, 4.0, 25.0);
    }
    for (int64_t o = 0; o < hidden; ++o) {
      for (int64_t i = 0; i < inter; ++i) want[t * hidden + o] += static_cast<double>(w2.dequant[o * inter + i]) * h[i];
    }
  }
  double range = 0;
  for (double v : want) range = std::max(range, std::fabs(v));

  // Deviation of an expert computed with the given up α from the reference, relative to its range.
  const auto deviation = [&](const Tensor& y) {
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(y.data[i] - want[i]));
    return worst / range;
  };
  const auto with_up_alpha = [&](float up_alpha) {
    Tensor g, u, y;
    linear_accumulators(*gate, x, g);
    linear_accumulators(*up, x, u);
    gated_activation(act, g, u, gate->output_scale(), up_alpha);
    linear(*down, g, y);
    return y;
  };

  // The engine's expert. Tolerance: the kernels' 16-bit fixed-point activations (≤ 2^-15 of each
  // block's largest value, twice: x and the SiTU output) and fp32 sums stay below 1e-3 of the range.
  Tensor y;
  gated_mlp(act, *gate, *up, *down, x, y);
  constexpr double kTolerance = 1e-3;
  EXPECT_LT(deviation(y), kTolerance);
  EXPECT_LT(deviation(with_up_alpha(shared_s2)), kTolerance);
  // The bugs this contract exists to prevent.
  EXPECT_GT(deviation(with_up_alpha(shared_s2 * shared_s2)), 100 * kTolerance) << "up α applied twice";
  EXPECT_GT(deviation(with_up_alpha(1.0f)), 100 * kTolerance) << "up α forgotten";
}

}  // namespace
}  // namespace k3::cpu
