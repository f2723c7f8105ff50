#include <cstring>
#include <fstream>

#include "core/numeric.h"
#include "family_test_util.h"
#include "io/safetensors.h"
#include "quant/plan/plan_report.h"

namespace k3 {
namespace {

using test::make_tiny;
using test::plan_headers_only;
using test::problems_text;

// BF16 family: every parameter equals the master rounded to BF16 (F32 where the release keeps F32).
TEST(DenseFamily, EveryParameterIsTheMasterInItsStoredDtype) {
  for (TinyArch arch : {TinyArch::KimiK3, TinyArch::KimiLinear}) {
    auto t = make_tiny(FamilyId::Bf16, arch);
    const LoadPlan plan = plan_headers_only(t.dir);
    ASSERT_TRUE(plan.ok()) << problems_text(plan);
    EXPECT_EQ(plan.family, "bf16");
    ASSERT_EQ(plan.bindings.size(), t.master.params.size());
    PlanFiles files(plan);
    for (size_t i = 0; i < plan.params.size(); ++i) {
      const auto& spec = plan.params[i];
      const auto got = materialize(plan.bindings[i], spec, files);
      const auto& want = t.master.at(spec.name);
      ASSERT_EQ(got.size(), want.size()) << spec.name;
      const bool f32 = plan.bindings[i].scheme.storage == "F32";
      for (size_t j = 0; j < want.size(); ++j) {
        const float expect = f32 ? want[j] : decode_bf16(encode_bf16(want[j]));
        ASSERT_EQ(got[j], expect) << spec.name << "[" << j << "]";
      }
    }
  }
}

TEST(DenseFamily, PeerFixturePlansCleanly) {
  const std::string dir = std::string(K3_SHARED_DIR) + "/fixtures/kimi-linear-peer/ckpt";
  const LoadPlan plan = plan_headers_only(dir);
  EXPECT_TRUE(plan.ok()) << problems_text(plan);
  // A_log is stored [1,1,H,1]: narrowed, not reshaped.
  const int64_t i = plan.index_of("model.layers.0.self_attn.A_log");
  ASSERT_GE(i, 0);
  ASSERT_EQ(plan.bindings[i].transforms.size(), 1u);
  EXPECT_EQ(plan.bindings[i].transforms[0], Transform::NarrowALog);
}

// Rewrites one tensor's name in a single-file copy of a checkpoint.
void rename_tensor(const std::string& src_dir, const std::string& dst_dir, const std::string& from, const std::string& to) {
  std::filesystem::remove_all(dst_dir);
  std::filesystem::create_directories(dst_dir);
  std::filesystem::copy_file(src_dir + "/config.json", dst_dir + "/config.json");
  const auto ckpt = SafetensorsCheckpoint::open(src_dir);
  SafetensorsWriter w;
  for (const auto& e : ckpt.entries()) {
    const auto& info = ckpt.info(e);
    auto bytes = ckpt.data(e);
    if (info.name == to) continue;
    w.add(info.name == from ? to : info.name, info.dtype, info.shape, std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }
  w.write(dst_dir + "/model.safetensors");
}

TEST(DenseFamily, RenamedTensorIsModuleNameDriftNotZeros) {
  auto t = make_tiny(FamilyId::Bf16, TinyArch::KimiK3);
  const std::string dir = ::testing::TempDir() + "/k3_dense_drift";
  rename_tensor(t.dir, dir, "language_model.model.layers.1.self_attn.q_proj.weight",
                "language_model.model.layers.1.self_attn.q_projection.weight");
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 2u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(), dir + "/model.safetensors: parameter 'model.layers.1.self_attn.q_proj.weight': "
                                           "missing tensor 'model.layers.1.self_attn.q_proj.weight'");
  EXPECT_EQ(plan.problems[1].text(), dir + "/model.safetensors: tensor 'language_model.model.layers.1.self_attn.q_projection.weight': "
                                           "tensor binds to no parameter (unknown or renamed module)");
}

TEST(DenseFamily, WrongShapeAndDtypeAreReported) {
  const std::string dir = ::testing::TempDir() + "/k3_dense_bad";
  auto t = make_tiny(FamilyId::Bf16, TinyArch::KimiLinear);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(t.dir + "/config.json", dir + "/config.json");
  const auto ckpt = SafetensorsCheckpoint::open(t.dir);
  SafetensorsWriter w;
  for (const auto& e : ckpt.entries()) {
    const auto& info = ckpt.info(e);
    auto bytes = ckpt.data(e);
    std::vector<uint8_t> copy(bytes.begin(), bytes.end());
    if (info.name == "model.norm.weight") {
      w.add(info.name, Dtype::I16, info.shape, copy);  // same bytes, integer dtype
    } else if (info.name == "model.layers.0.self_attn.f_a_proj.weight") {
      w.add(info.name, info.dtype, {info.shape[1], info.shape[0]}, copy);  // transposed shape
    } else {
      w.add(info.name, info.dtype, info.shape, copy);
    }
  }
  w.write(dir + "/model.safetensors");
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 2u) << problems_text(plan);
  const std::string file = dir + "/model.safetensors";
  EXPECT_EQ(plan.problems[0].text(), file + ": tensor 'model.layers.0.self_attn.f_a_proj.weight': field 'shape': shape [128, 32] "
                                            "does not match parameter 'model.layers.0.self_attn.f_a_proj.weight' [32, 128]");
  EXPECT_EQ(plan.problems[1].text(), file + ": tensor 'model.norm.weight': field 'dtype': dtype I16 is not a float type, "
                                            "but parameter 'model.norm.weight' is unquantized");
}

}  // namespace
}  // namespace k3
