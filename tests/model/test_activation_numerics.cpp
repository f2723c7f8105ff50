// ActivationNumerics::Bf16Inputs (`--activations bf16`): every linear's input rounded to bf16 before
// the weight format's own kernel, as the CUDA backend's GEMMs take it. The logits move by the model's
// sensitivity to that rounding — the yardstick for how far the GPU may sit from the float CPU engine
// (docs/cuda-backend.md "End to end").
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "model/engine_test_util.h"

namespace k3 {
namespace {

TEST(ActivationNumerics, Bf16InputsMovesLogitsByTheRoundingSensitivity) {
  for (const TinyArch arch : {TinyArch::KimiLinear, TinyArch::KimiK3}) {
    const test::TinyCheckpoint ckpt = test::make_tiny_pinned_routing(FamilyId::Bf16, arch, 11);
    EngineOptions bf16;
    bf16.linear.activation = cpu::ActivationNumerics::Bf16Inputs;
    Engine float_engine(ckpt.dir);
    Engine bf16_engine(ckpt.dir, bf16);
    const std::vector<int64_t> prompt = test::test_prompt(24, float_engine.config().vocab_size);
    const std::vector<float> want = test::prefill_logits(float_engine, prompt);
    const std::vector<float> got = test::prefill_logits(bf16_engine, prompt);
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    const double err = test::relative_max_error(got, want);
    std::printf("[ %s tiny ] bf16 linear inputs vs float: rel max logit err %.2e\n",
                arch == TinyArch::KimiK3 ? "kimi-k3" : "kimi-linear", err);
    // Rounding happened (bf16 keeps 8 bits), and it is rounding, not a different model.
    EXPECT_GT(err, 1e-4);
    EXPECT_LT(err, 0.2);
  }
}

}  // namespace
}  // namespace k3
