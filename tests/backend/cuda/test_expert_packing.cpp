// choose_expert_packing (no GPU needed, so it runs in CI): every make-tiny family's routed-expert
// banks take the form the CUDA uploader should give them — NVFP4 / MXFP4 packed for the W4A16
// kernels, ModelSlim W4A8 and GGUF packed only with packed_int_experts, everything else bf16 — so a
// family never falls back to bf16 without a test noticing.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/executor/expert_packing.h"
#include "cuda_test_util.h"
#include "model/engine_test_util.h"
#include "quant/families/family.h"

namespace k3::cuda {
namespace {

using Kind = ExpertPacking::Kind;

struct PackingCase {
  FamilyId family;
  TinyArch arch;
  Kind with_int, without_int;  // packed_int_experts on / off
};

class ExpertPackingTest : public ::testing::TestWithParam<PackingCase> {};

TEST_P(ExpertPackingTest, EveryBankTakesItsFamilysForm) {
  const PackingCase c = GetParam();
  SCOPED_TRACE(family_name(c.family));
  const k3::test::TinyCheckpoint ckpt = k3::test::make_tiny_conditioned(c.family, c.arch, 3);
  const LoadPlan plan = plan_checkpoint(open_checkpoint_dir(ckpt.dir));
  ASSERT_TRUE(plan.ok());
  PlanFiles files(plan);
  int banks = 0;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const std::string& name = plan.params[i].name;
    const bool w1 = name.ends_with("experts.w1.weight"), w2 = name.ends_with("experts.w2.weight");
    if (!w1 && !w2) continue;
    std::optional<size_t> second;
    if (w1) {
      const int64_t j = plan.index_of(name.substr(0, name.size() - 9) + "w3.weight");
      ASSERT_GE(j, 0) << name;
      second = static_cast<size_t>(j);
    }
    EXPECT_EQ(choose_expert_packing(plan, files, i, second, true).kind, c.with_int) << name;
    EXPECT_EQ(choose_expert_packing(plan, files, i, second, false).kind, c.without_int) << name;
    ++banks;
  }
  EXPECT_GT(banks, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Families, ExpertPackingTest,
    ::testing::Values(PackingCase{FamilyId::Bf16, TinyArch::KimiK3, Kind::kBf16, Kind::kBf16},
                      PackingCase{FamilyId::ModelOptNvfp4, TinyArch::KimiK3, Kind::kW4, Kind::kW4},
                      PackingCase{FamilyId::ModelOptMixed, TinyArch::KimiK3, Kind::kW4, Kind::kW4},
                      PackingCase{FamilyId::CompressedTensorsMxfp4, TinyArch::KimiLinear, Kind::kW4, Kind::kW4},
                      PackingCase{FamilyId::Fp8Block, TinyArch::KimiK3, Kind::kBf16, Kind::kBf16},
                      PackingCase{FamilyId::ModelOptFp8, TinyArch::KimiLinear, Kind::kBf16, Kind::kBf16},
                      PackingCase{FamilyId::ModelSlimW4A8, TinyArch::KimiK3, Kind::kW4A8, Kind::kBf16},
                      PackingCase{FamilyId::Gguf, TinyArch::KimiLinear, Kind::kGgml, Kind::kBf16},
                      PackingCase{FamilyId::GgufExpertPack, TinyArch::KimiK3, Kind::kGgml, Kind::kBf16}),
    cuda::test::CaseIndexName());

}  // namespace
}  // namespace k3::cuda
