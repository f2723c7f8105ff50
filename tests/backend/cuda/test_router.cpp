// MoE router kernel against the CPU router (cpu::route, backend/cpu/moe.cpp).
//
// Expert ids must match exactly, in pick order, ties included (inputs drawn from a handful of values
// make many exact ties). Weights: the GPU's expf differs from glibc's exp by ≤ 2 ulp, so sigmoid
// weights match to 1e-6 relative; softmax sums in a different order: 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/ops.h"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/ops/ops_tuning.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"
#include "model/config.h"

namespace k3::cuda {
namespace {

// The CPU router for the same parameters.
std::vector<cpu::Route> cpu_route(const RouterParams& m, const float* logits, const std::vector<float>& bias) {
  MoeConfig c;
  c.num_experts = m.experts;
  c.experts_per_token = m.top_k;
  c.scoring = m.sigmoid ? RouterScoring::kSigmoid : RouterScoring::kSoftmax;
  c.renormalize = m.renormalize;
  c.routed_scaling_factor = m.scaling;
  c.use_grouped_topk = m.groups > 1;
  c.num_expert_group = m.groups;
  c.topk_group = m.topk_group;
  return cpu::route(c, logits, bias);
}

struct RouterCase {
  const char* name;
  RouterParams p;
  bool ties;     // logits and bias from a few values
  int64_t tokens;
};

class RouterTest : public ::testing::TestWithParam<RouterCase> {};

TEST_P(RouterTest, MatchesCpuRoute) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const RouterCase c = GetParam();
  SCOPED_TRACE(std::string(c.name) + ", seed " + std::to_string(rng.seed()));
  const RouterParams& p = c.p;
  const int64_t T = c.tokens, E = p.experts;
  std::vector<float> logits = rng.normal(static_cast<size_t>(T * E), 2.0f);
  std::vector<float> bias = rng.normal(static_cast<size_t>(E), 0.1f);
  if (c.ties) {
    const float lv[] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f};
    for (float& v : logits) v = lv[rng.uniform_int(0, 4)];
    for (float& v : bias) v = rng.uniform_int(0, 1) * 0.25f;
  }
  Arena& a = test::arena();
  const DeviceTensor dl = upload_f32(a, logits.data(), T, E, DType::kF32, "logits");
  const DeviceTensor db = upload_f32(a, bias.data(), 1, E, DType::kF32, "bias");
  const DeviceTensor di = a.alloc_tensor(DType::kI32, T, p.top_k, "ids");
  const DeviceTensor dw = a.alloc_tensor(DType::kF32, T, p.top_k, "weights");
  std::vector<std::vector<cpu::Route>> refs;
  for (int64_t t = 0; t < T; ++t) refs.push_back(cpu_route(p, logits.data() + t * E, bias));
  const bool grouped = p.groups > 1 && p.topk_group < p.groups;
  std::vector<RouterKernel> kernels = {RouterKernel::kBlock};
  if (!grouped && E <= 1024) kernels.push_back(RouterKernel::kWarp);
  for (RouterKernel kernel : kernels) {
    SCOPED_TRACE(kernel == RouterKernel::kBlock ? "block kernel" : "warp kernel");
    poison(di);
    poison(dw);
    moe_route(p, dl, db.as<float>(), di, dw, nullptr, kernel);
    const std::vector<int32_t> ids = download_i32(di);
    const std::vector<float> w = download_f32(dw);
    const double tol = p.sigmoid ? 1e-6 : 1e-5;
    int64_t bad_ids = 0, bad_w = 0;
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<cpu::Route>& ref = refs[t];
      for (int64_t i = 0; i < p.top_k; ++i) {
        const int64_t j = t * p.top_k + i;
        if (ids[j] != ref[i].expert) {
          if (++bad_ids <= 5) ADD_FAILURE() << "token " << t << " slot " << i << ": " << ids[j] << " vs " << ref[i].expert;
        }
        if (!(std::fabs(w[j] - ref[i].weight) <= tol * std::fabs(ref[i].weight) + 1e-30)) {
          if (++bad_w <= 5) ADD_FAILURE() << "token " << t << " slot " << i << ": weight " << w[j] << " vs " << ref[i].weight;
        }
      }
    }
    EXPECT_EQ(bad_ids, 0);
    EXPECT_EQ(bad_w, 0);
  }
}

RouterParams params(int64_t E, int64_t k, int64_t groups, int64_t topk_group, bool sigmoid, bool renorm, float scaling) {
  RouterParams p;
  p.experts = E;
  p.top_k = k;
  p.groups = groups;
  p.topk_group = topk_group;
  p.sigmoid = sigmoid;
  p.renormalize = renorm;
  p.scaling = scaling;
  return p;
}

INSTANTIATE_TEST_SUITE_P(
    Configs, RouterTest,
    ::testing::Values(RouterCase{"kimi-k3 896/16", params(896, 16, 1, 1, true, true, 1.0f), false, 200},
                      RouterCase{"kimi-k3 ties", params(896, 16, 1, 1, true, true, 1.0f), true, 64},
                      RouterCase{"grouped 256/8 of 8 groups keep 4", params(256, 8, 8, 4, true, true, 2.5f), false, 100},
                      RouterCase{"grouped ties", params(64, 6, 4, 2, true, true, 1.0f), true, 100},
                      RouterCase{"k beyond kept groups (-inf ties)", params(16, 6, 4, 1, true, true, 1.0f), false, 50},
                      RouterCase{"softmax no renorm", params(64, 6, 1, 1, false, false, 1.0f), false, 50},
                      RouterCase{"kimi-linear 256/8 one group", params(256, 8, 1, 1, true, true, 2.446f), false, 33},
                      RouterCase{"1024 experts, k 64", params(1024, 64, 1, 1, true, true, 1.0f), false, 9},
                      RouterCase{"400 experts (16 slots per lane), ties", params(400, 10, 1, 1, true, true, 1.0f), true, 30},
                      RouterCase{"odd E, softmax ties", params(100, 7, 1, 1, false, true, 1.0f), true, 40},
                      RouterCase{"groups all kept", params(64, 6, 4, 4, true, true, 1.0f), true, 20}), test::CaseIndexName());

TEST(CudaRouter, ParamsFromConfig) {
  MoeConfig m;
  m.num_experts = 256;
  m.experts_per_token = 8;
  m.num_expert_group = 8;
  m.topk_group = 4;
  m.routed_scaling_factor = 2.5;
  RouterParams p = router_params(m);
  EXPECT_EQ(p.groups, 8);
  EXPECT_EQ(p.topk_group, 4);
  EXPECT_EQ(p.scaling, 2.5f);
  EXPECT_TRUE(p.sigmoid);
  m.use_grouped_topk = false;
  EXPECT_EQ(router_params(m).groups, 1);
}

}  // namespace
}  // namespace k3::cuda
