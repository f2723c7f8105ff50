#include <gtest/gtest.h>

#include "backend/cuda/core/device.h"

TEST(CudaDevice, SaxpyMatchesHost) {
  if (k3::cuda::list_devices().empty()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> x(1000), y(1000), out;
  for (int i = 0; i < 1000; ++i) {
    x[i] = 0.5f * i;
    y[i] = 3.0f - i;
  }
  k3::cuda::saxpy(2.0f, x, y, out);
  ASSERT_EQ(out.size(), x.size());
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(out[i], 2.0f * x[i] + y[i]) << i;
}
