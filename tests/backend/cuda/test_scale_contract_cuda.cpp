// The MoE scale contract (quant-formats §3.4) on the GPU, as tests/model/test_scale_contract.cpp on
// the CPU: NVFP4 SiTU experts whose w1/w3 share a non-unit weight_scale_2, run through the CUDA MoE
// pipeline (dispatch → gather → the packed W4A16 GEMM1 with its per-expert, per-part out_scale →
// gated_activation with unit alphas → GEMM2 → combine). GEMM1's α (gate and up) must be applied
// exactly once and before SiTU's tanh: the output matches a float64 reference of the dequantised
// weights, and the two classic bugs — the up α applied twice, or forgotten — land far outside the
// tolerance, which shows the test would catch them. Two experts with different scales check that
// each expert's own α is used. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/moe/moe.h"
#include "backend/cuda/moe/moe_w4.h"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"
#include "model/config.h"
#include "quant/formats/nvfp4/nvfp4.h"

namespace k3::cuda {
namespace {

struct Nvfp4Weight {
  std::vector<uint8_t> packed, scales;
  std::vector<float> dequant;  // exact values, global scale included
};

Nvfp4Weight quantize(int64_t n, int64_t k, float global, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = d(rng);
  Nvfp4Weight q{std::vector<uint8_t>(static_cast<size_t>(n * k / 2)), std::vector<uint8_t>(static_cast<size_t>(n * k / 16)),
                std::vector<float>(static_cast<size_t>(n * k))};
  quantize_nvfp4(w.data(), n, k, global, q.packed.data(), q.scales.data());
  dequant_nvfp4(q.packed.data(), q.scales.data(), global, n, k, q.dequant.data());
  return q;
}

double situ(double g, double u, double beta, double beta_lin) {
  return beta * std::tanh(g / beta) / (1.0 + std::exp(-g)) * beta_lin * std::tanh(u / beta_lin);
}

TEST(MoeScaleContractCuda, SituSeesDequantisedGateAndUpExactlyOnce) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  Arena& a = test::arena();
  constexpr int64_t kHidden = 128, kInter = 64, kTokens = 6, kExperts = 2;
  constexpr double kBeta = 4.0, kBetaLin = 25.0;
  std::mt19937 rng(7);
  // Per expert: w1 and w3 share one weight_scale_2 (ModelOpt's rule), w2 has its own.
  const float shared_s2[kExperts] = {nvfp4_global_scale(2.0f), nvfp4_global_scale(3.0f)};
  const float down_s2[kExperts] = {nvfp4_global_scale(1.5f), nvfp4_global_scale(2.5f)};
  std::vector<Nvfp4Weight> w1, w3, w2;
  for (int64_t e = 0; e < kExperts; ++e) {
    w1.push_back(quantize(kInter, kHidden, shared_s2[e], rng));
    w3.push_back(quantize(kInter, kHidden, shared_s2[e], rng));
    w2.push_back(quantize(kHidden, kInter, down_s2[e], rng));
  }
  const MoeW4Bank g1 = moe_w4_alloc(a, W4Format::kNvfp4, kExperts, 2 * kInter, kHidden, 2, "w1|w3");
  const MoeW4Bank g2 = moe_w4_alloc(a, W4Format::kNvfp4, kExperts, kHidden, kInter, 1, "w2");
  for (int64_t e = 0; e < kExperts; ++e) {
    moe_w4_upload_rows(g1, e * 2 * kInter, w1[e].packed.data(), w1[e].scales.data(), kInter);
    moe_w4_upload_rows(g1, e * 2 * kInter + kInter, w3[e].packed.data(), w3[e].scales.data(), kInter);
    moe_w4_upload_rows(g2, e * kHidden, w2[e].packed.data(), w2[e].scales.data(), kHidden);
  }
  moe_w4_upload_out_scale(g2, down_s2);

  // Tokens alternate between the experts, one pick each (weight 1).
  std::vector<int32_t> ids(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) ids[static_cast<size_t>(t)] = static_cast<int32_t>(t % kExperts);
  const DeviceTensor dids = a.alloc_tensor(DType::kI32, kTokens, 1, "ids");
  copy_bytes_to_device(dids.data, ids.data(), ids.size() * sizeof(int32_t));
  const std::vector<float> ones(kTokens, 1.0f);
  const DeviceTensor weights = upload_f32(a, ones.data(), kTokens, 1, DType::kF32, "routing weights");
  const MoeDispatch d = moe_dispatch_view(a.alloc(moe_dispatch_bytes(kTokens, 1, kExperts), "dispatch"), kTokens, 1, kExperts);
  moe_dispatch(dids, d, nullptr);

  std::normal_distribution<float> nd(0.0f, 3.0f);  // pre-activations reach SiTU's non-linear range
  std::vector<float> x(static_cast<size_t>(kTokens * kHidden));
  for (float& v : x) v = test::round_bf16(nd(rng));  // the GPU takes bf16 activations
  const DeviceTensor dx = upload_f32(a, x.data(), kTokens, kHidden, DType::kBF16, "x");
  const DeviceTensor xs = a.alloc_tensor(DType::kBF16, kTokens, kHidden, "sorted rows");
  moe_gather(dx, d, xs, nullptr);

  // float64 reference on the exact dequantised weights.
  std::vector<double> want(static_cast<size_t>(kTokens * kHidden), 0.0);
  for (int64_t t = 0; t < kTokens; ++t) {
    const int64_t e = t % kExperts;
    std::vector<double> h(kInter);
    for (int64_t i = 0; i < kInter; ++i) {
      double g = 0, u = 0;
      for (int64_t c = 0; c < kHidden; ++c) {
        g += static_cast<double>(w1[e].dequant[i * kHidden + c]) * x[t * kHidden + c];
        u += static_cast<double>(w3[e].dequant[i * kHidden + c]) * x[t * kHidden + c];
      }
      h[i] = situ(g, u, kBeta, kBetaLin);
    }
    for (int64_t o = 0; o < kHidden; ++o) {
      for (int64_t i = 0; i < kInter; ++i) want[t * kHidden + o] += static_cast<double>(w2[e].dequant[o * kInter + i]) * h[i];
    }
  }
  double range = 0;
  for (double v : want) range = std::max(range, std::fabs(v));

  ActivationConfig config;
  config.kind = Activation::kSitu;
  config.situ_beta = kBeta;
  config.situ_linear_beta = kBetaLin;
  const GatedActivation act = gated_activation_params(config);
  ASSERT_EQ(act.gate_alpha, 1.0f);  // the packed GEMM returns dequantised values: no α left for the activation
  ASSERT_EQ(act.up_alpha, 1.0f);
  // The pipeline with GEMM1's out_scale = {gate α, up α} per expert; deviation from the reference
  // relative to its range.
  const auto deviation = [&](const std::vector<float>& up_alpha, bool swap_experts = false) {
    std::vector<float> s;
    for (int64_t e = 0; e < kExperts; ++e) {
      s.insert(s.end(), {shared_s2[swap_experts ? kExperts - 1 - e : e], up_alpha[static_cast<size_t>(e)]});
    }
    moe_w4_upload_out_scale(g1, s.data());
    const DeviceTensor gate_up = a.alloc_tensor(DType::kF32, kTokens, 2 * kInter, "gate|up");
    moe_grouped_gemm_w4(xs, g1, d, gate_up, nullptr);
    const DeviceTensor h = a.alloc_tensor(DType::kBF16, kTokens, kInter, "activation");
    gated_activation(act, gate_up.col_slice(0, kInter), gate_up.col_slice(kInter, kInter), h, nullptr);
    const DeviceTensor ys = a.alloc_tensor(DType::kF32, kTokens, kHidden, "expert outputs");
    moe_grouped_gemm_w4(h, g2, d, ys, nullptr);
    const DeviceTensor y = a.alloc_tensor(DType::kF32, kTokens, kHidden, "y");
    moe_combine(ys, d, weights, y, false, nullptr);
    const std::vector<float> got = download_f32(y);
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
    return worst / range;
  };
  // Tolerance: bf16 rounding of the SiTU output (2^-9 relative per element, 64 per output) and fp32
  // sums stay well below 5e-3 of the range.
  constexpr double kTolerance = 5e-3;
  EXPECT_LT(deviation({shared_s2[0], shared_s2[1]}), kTolerance);
  // The bugs this contract exists to prevent.
  EXPECT_GT(deviation({shared_s2[0] * shared_s2[0], shared_s2[1] * shared_s2[1]}), 20 * kTolerance) << "up α applied twice";
  EXPECT_GT(deviation({1.0f, 1.0f}), 20 * kTolerance) << "up α forgotten";
  EXPECT_GT(deviation({shared_s2[1], shared_s2[0]}, true), 20 * kTolerance) << "each expert given the other's α";
}

}  // namespace
}  // namespace k3::cuda
