// The bookkeeping of a block input's shared forms (SharedInputForms, executor/step.h), host only (runs
// in CI without a GPU): a form is found only for the shared input's exact view and the key it was kept
// under; a new input drops the last one's forms; a scope's restore drops the forms kept inside it and
// brings back the floor below which a linear must not give arena memory back; at most four are kept.
// The end-to-end effect on results (none: the same quantisation, made once) is CudaModelVsCpu's.
#include <gtest/gtest.h>

#include <array>

#include "backend/cuda/executor/step.h"

namespace k3::cuda {
namespace {

TEST(SharedInputForms, KeepsFormsOfTheSharedInputUntilTheScopeThatMadeThemEnds) {
  std::array<char, 4096> memory{};
  const DeviceTensor x{memory.data(), DType::kBF16, 2, 64};
  const DeviceTensor y{memory.data() + 1024, DType::kBF16, 2, 64};
  void* form_a = memory.data() + 2048;
  void* form_b = memory.data() + 2560;
  SharedInputForms forms;
  EXPECT_FALSE(forms.keep(x, 1, form_a, 100)) << "nothing is shared yet";
  EXPECT_EQ(forms.floor(), 0u);

  forms.share(x);
  EXPECT_EQ(forms.find(x, 1), nullptr);
  ASSERT_TRUE(forms.keep(x, 1, form_a, 100));
  EXPECT_EQ(forms.find(x, 1), form_a);
  EXPECT_EQ(forms.find(x, 2), nullptr) << "another key is another layout";
  EXPECT_EQ(forms.floor(), 100u);

  // Another view of the same memory (fewer rows, a column slice, another dtype) is other rows.
  EXPECT_EQ(forms.find(x.row_slice(0, 1), 1), nullptr);
  EXPECT_EQ(forms.find(x.col_slice(0, 32), 1), nullptr);
  EXPECT_EQ(forms.find(DeviceTensor{x.data, DType::kF32, 2, 32}, 1), nullptr);
  EXPECT_FALSE(forms.keep(y, 2, form_b, 200)) << "only the shared input's forms are kept";

  // A nested scope over the same input (a MoE block's shared experts) sees the outer form, and the
  // form it keeps goes when it ends.
  const SharedInputForms::State outer = forms.state();
  forms.share(x);
  EXPECT_EQ(forms.find(x, 1), form_a);
  ASSERT_TRUE(forms.keep(x, 2, form_b, 200));
  EXPECT_EQ(forms.floor(), 200u);
  forms.restore(outer);
  EXPECT_EQ(forms.find(x, 2), nullptr);
  EXPECT_EQ(forms.find(x, 1), form_a);
  EXPECT_EQ(forms.floor(), 100u);

  // A new input drops the forms of the last; restoring the scope's state brings them back.
  const SharedInputForms::State before_y = forms.state();
  forms.share(y);
  EXPECT_EQ(forms.find(x, 1), nullptr);
  EXPECT_EQ(forms.floor(), 0u);
  forms.restore(before_y);
  EXPECT_EQ(forms.find(x, 1), form_a);

  // Room for four; a fifth form is not kept (its linear makes it in fresh scratch).
  for (int64_t key = 2; key <= 4; ++key) EXPECT_TRUE(forms.keep(x, key, form_b, static_cast<size_t>(100 + key)));
  EXPECT_FALSE(forms.keep(x, 5, form_b, 300));
  EXPECT_EQ(forms.floor(), 104u);
}

}  // namespace
}  // namespace k3::cuda
