// The plan entries of the format folders (quant/plan/plan_format.h): every scheme of the list has
// one, with the names `k3 check` prints, the quantized Linear layouts and the shape checks.

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "quant/formats/dense/dense_plan.h"
#include "quant/formats/fp8/fp8_plan.h"
#include "quant/formats/ggml/ggml_plan.h"
#include "quant/formats/modelslim/modelslim_plan.h"
#include "quant/formats/mxfp4/mxfp4_plan.h"
#include "quant/formats/nvfp4/nvfp4_plan.h"
#include "quant/plan/plan_format.h"

namespace k3 {
namespace {

using Shape = std::vector<uint64_t>;

TEST(PlanFormat, EveryListedSchemeHasItsEntry) {
  std::set<std::string> kind_names;
#define K3_CHECK_ENTRY(kind, suffix)                                         \
  {                                                                          \
    const PlanFormat& f = plan_format(SchemeKind::kind);                     \
    ASSERT_NE(f.kind_name, nullptr) << #suffix;                              \
    EXPECT_NE(f.name, nullptr) << #suffix;                                   \
    EXPECT_NE(f.dequant, nullptr) << #suffix;                                \
    EXPECT_EQ(scheme_kind_name(SchemeKind::kind), std::string(f.kind_name)); \
    kind_names.insert(f.kind_name);                                          \
  }
  K3_SCHEME_LIST(K3_CHECK_ENTRY)
#undef K3_CHECK_ENTRY
  size_t listed = 0;
#define K3_COUNT(kind, suffix) ++listed;
  K3_SCHEME_LIST(K3_COUNT)
#undef K3_COUNT
  EXPECT_EQ(kind_names.size(), listed);  // kind names are distinct
}

TEST(PlanFormat, SchemeNames) {
  EXPECT_EQ(dense_scheme("BF16").name(), "BF16");
  EXPECT_EQ(fp8_tensor_scheme().name(), "FP8_TENSOR");
  EXPECT_EQ(fp8_block_scheme(128, 64).name(), "FP8_BLOCK128x64");
  EXPECT_EQ(nvfp4_scheme().name(), "NVFP4/g16");
  EXPECT_EQ(mxfp4_layout().scheme.name(), "MXFP4/g32");
  EXPECT_EQ(w4a8_scheme(64, true).name(), "W4A8/g64/packed");
  EXPECT_EQ(w4a8_scheme(0, false).name(), "W4A8/channel/unpacked");
  EXPECT_EQ(w8a8_scheme(false).name(), "W8A8_DYNAMIC");
  EXPECT_EQ(w8a8_scheme(true).name(), "W8A8_STATIC");
  EXPECT_EQ(ggml_scheme(GgmlType::Q4_K).name(), "GGUF:q4_K");
  EXPECT_EQ(ggml_split_kv_b_scheme().name(), "GGUF_SPLIT_KV_B(Q4_0,Q2_K)");
}

TEST(PlanFormat, QuantizedLinearLayouts) {
  const QuantizedLayout mx = mxfp4_layout();
  EXPECT_EQ(mx.weight_shape(64, 128), (Shape{64, 64}));
  EXPECT_EQ(mx.scale_shape(64, 128), (Shape{64, 4}));
  const QuantizedLayout fp8 = fp8_block_layout(128, 128, "weight_scale_inv");
  EXPECT_EQ(fp8.weight_shape(300, 200), (Shape{300, 200}));
  EXPECT_EQ(fp8.scale_shape(300, 200), (Shape{3, 2}));
  EXPECT_EQ(fp8.scale_suffix, "weight_scale_inv");
  // A scheme without a quantized Linear layout says so instead of inventing shapes.
  const QuantizedLayout none{nvfp4_scheme(), "weight", "weight_scale", {"F8_E4M3"}};
  EXPECT_THROW(none.weight_shape(64, 128), Error);
}

TEST(PlanFormat, ShapeProblems) {
  using Texts = std::vector<std::string>;
  EXPECT_TRUE(shape_problems(mxfp4_layout().scheme, 8, 64).empty());
  EXPECT_EQ(shape_problems(mxfp4_layout().scheme, 8, 48),
            (Texts{"MXFP4 needs the input dimension K = 48 to be a multiple of 32"}));
  EXPECT_TRUE(shape_problems(nvfp4_scheme(), 8, 32).empty());
  EXPECT_EQ(shape_problems(nvfp4_scheme(), 8, 40), (Texts{"NVFP4 needs K % 16 == 0, K is 40"}));
  EXPECT_EQ(shape_problems(w4a8_scheme(64, true), 7, 96),
            (Texts{"N = 7 is odd; the packed int4 layout needs an even row count",
                   "K = 96 is not a multiple of group_size 64"}));
  EXPECT_TRUE(shape_problems(w4a8_scheme(0, false), 7, 96).empty());
  EXPECT_TRUE(shape_problems(w8a8_scheme(false), 7, 96).empty());
  EXPECT_TRUE(shape_problems(fp8_block_scheme(128, 128), 7, 9).empty());
}

}  // namespace
}  // namespace k3
