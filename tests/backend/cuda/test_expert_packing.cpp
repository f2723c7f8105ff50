// choose_expert_packing (no GPU needed, so it runs in CI): every make-tiny family's routed-expert
// banks take the form the CUDA uploader should give them — NVFP4 / MXFP4 packed for the W4A16
// kernels, FP8-block packed for its grouped GEMM, ModelSlim W4A8 and GGUF packed only with
// packed_int_experts, everything else bf16 — so a family never falls back to bf16 without a test
// noticing. A packed bank is packed by its own
// scheme's entry (cuda_format.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>

#include "backend/cuda/executor/bank_linear.h"
#include "backend/cuda/executor/expert_packing.h"
#include "cuda_test_util.h"
#include "model/engine_test_util.h"
#include "quant/families/family.h"

namespace k3::cuda {
namespace {

// A make-tiny checkpoint of one family, its load plan and the plan's files.
struct TinyPlan {
  TinyPlan(FamilyId family, TinyArch arch)
      : ckpt(k3::test::make_tiny_conditioned(family, arch, 3)), plan(plan_checkpoint(open_checkpoint_dir(ckpt.dir))),
        files(plan) {}
  k3::test::TinyCheckpoint ckpt;
  LoadPlan plan;
  PlanFiles files;
};

struct PackingCase {
  FamilyId family;
  TinyArch arch;
  bool with_int, without_int;  // packed with packed_int_experts on / off
};

class ExpertPackingTest : public ::testing::TestWithParam<PackingCase> {};

TEST_P(ExpertPackingTest, EveryBankTakesItsFamilysForm) {
  const PackingCase c = GetParam();
  SCOPED_TRACE(family_name(c.family));
  TinyPlan tiny(c.family, c.arch);
  const LoadPlan& plan = tiny.plan;
  ASSERT_TRUE(plan.ok());
  PlanFiles& files = tiny.files;
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
    for (const bool packed_int : {true, false}) {
      const ExpertPacking p = choose_expert_packing(plan, files, i, second, packed_int);
      EXPECT_EQ(p.packed(), packed_int ? c.with_int : c.without_int) << name;
      if (p.packed()) {
        EXPECT_EQ(p.scheme, plan.bindings[i].scheme.kind) << name;
        EXPECT_EQ(p.format, &cuda_format(p.scheme)) << name;
      }
    }
    ++banks;
  }
  EXPECT_GT(banks, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Families, ExpertPackingTest,
    ::testing::Values(PackingCase{FamilyId::Bf16, TinyArch::KimiK3, false, false},
                      PackingCase{FamilyId::ModelOptNvfp4, TinyArch::KimiK3, true, true},
                      PackingCase{FamilyId::ModelOptMixed, TinyArch::KimiK3, true, true},
                      PackingCase{FamilyId::CompressedTensorsMxfp4, TinyArch::KimiLinear, true, true},
                      PackingCase{FamilyId::Fp8Block, TinyArch::KimiK3, true, true},
                      PackingCase{FamilyId::ModelOptFp8, TinyArch::KimiLinear, false, false},
                      PackingCase{FamilyId::ModelSlimW4A8, TinyArch::KimiK3, true, false},
                      PackingCase{FamilyId::Gguf, TinyArch::KimiLinear, true, false},
                      PackingCase{FamilyId::GgufExpertPack, TinyArch::KimiK3, true, false}),
    cuda::test::CaseIndexName());

// dense_bank_layout (bank_linear.h): which dense linears of each make-tiny family run as a bank of
// one expert on their format's expert kernels. Every linear of a dense_as_bank scheme whose layout the
// expert kernels take is banked (GGUF and W4A8 only with packed_int), none of another scheme, and so
// is a head share of the rows in whole 16-row groups. Under DenseLinears::kAuto only the schemes that
// measured the bank form at least as fast as bf16 bank theirs; under kBf16 none.
struct DenseCase {
  FamilyId family;
  TinyArch arch;
  bool banked;       // some linear is banked (with packed_int, DenseLinears::kPacked)
  bool banked_auto;  // ... under DenseLinears::kAuto
};

class DenseLinearPackingTest : public ::testing::TestWithParam<DenseCase> {};

TEST_P(DenseLinearPackingTest, EveryLinearOfABankSchemeIsBanked) {
  const DenseCase c = GetParam();
  SCOPED_TRACE(family_name(c.family));
  TinyPlan tiny(c.family, c.arch);
  const LoadPlan& plan = tiny.plan;
  ASSERT_TRUE(plan.ok());
  PlanFiles& files = tiny.files;
  int linears = 0, banked = 0, banked_auto = 0;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const ParamSpec& spec = plan.params[i];
    if (spec.kind != ParamKind::Linear || spec.shape.size() != 2) continue;
    ++linears;
    const int64_t n = static_cast<int64_t>(spec.shape[0]), k = static_cast<int64_t>(spec.shape[1]);
    const CudaFormat& f = cuda_format(plan.bindings[i].scheme.kind);
    const std::optional<int64_t> layout = dense_bank_layout(plan, files, i, {0, n}, true);
    const bool bank_scheme = f.dense_as_bank && f.linear == nullptr;
    const bool fits = bank_scheme && plan.bindings[i].layout_only() && f.expert_layout(plan.bindings[i], 1, n, k, files);
    EXPECT_EQ(layout.has_value(), fits) << spec.name;
    if (!layout) continue;
    ++banked;
    banked_auto += banks_dense_linears(f, DenseLinears::kAuto);
    EXPECT_TRUE(banks_dense_linears(f, DenseLinears::kPacked)) << spec.name;
    EXPECT_FALSE(banks_dense_linears(f, DenseLinears::kBf16)) << spec.name;
    EXPECT_EQ(dense_bank_layout(plan, files, i, {0, n}, false).has_value(), !f.needs_packed_int) << spec.name;
    // A head share (the second half of the rows) is banked in whole 16-row groups from an even row.
    const IndexRange half{n / 2, n / 2};
    EXPECT_EQ(dense_bank_layout(plan, files, i, half, true), n % 32 == 0 ? layout : std::nullopt)
        << spec.name << ": a head share";
  }
  EXPECT_GT(linears, 0);
  std::printf("[ %s ] %d of %d dense linears banked (%d by default)\n", family_name(c.family), banked, linears,
              banked_auto);
  EXPECT_EQ(banked > 0, c.banked);
  EXPECT_EQ(banked_auto, c.banked_auto ? banked : 0);
}

INSTANTIATE_TEST_SUITE_P(
    Families, DenseLinearPackingTest,
    ::testing::Values(DenseCase{FamilyId::Bf16, TinyArch::KimiK3, false, false},
                      DenseCase{FamilyId::ModelOptNvfp4, TinyArch::KimiK3, true, false},
                      DenseCase{FamilyId::CompressedTensorsMxfp4, TinyArch::KimiLinear, false, false},
                      DenseCase{FamilyId::Fp8Block, TinyArch::KimiK3, false, false},
                      DenseCase{FamilyId::ModelSlimW4A8, TinyArch::KimiK3, true, true},
                      DenseCase{FamilyId::Gguf, TinyArch::KimiK3, true, false},
                      DenseCase{FamilyId::Gguf, TinyArch::KimiLinear, true, false}),
    cuda::test::CaseIndexName());

}  // namespace
}  // namespace k3::cuda
