// The device's greedy pick (row_argmax) against the host's (argmax_rows) on fresh random logits:
// ties at the maximum (the lowest column wins), rows of one repeated value, a NaN or an infinity
// anywhere (−1), vocabulary-sized and odd-sized rows, and rows that are not 16-byte aligned (the
// scalar path) as well as aligned ones (the float4 path).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cuda/core/upload.h"
#include "backend/cuda/ops/ops.h"
#include "backend/executor.h"
#include "cuda_test_util.h"

namespace k3::cuda {
namespace {

struct ArgmaxCase {
  int64_t rows, n;
  int64_t pad;  // floats before each row's first column (1: rows not 16-byte aligned)
};

class RowArgmaxTest : public ::testing::TestWithParam<ArgmaxCase> {};

TEST_P(RowArgmaxTest, MatchesTheHostsGreedyPick) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const auto [rows, n, pad] = GetParam();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Tensor logits(rows, n);
  logits.data = rng.normal(static_cast<size_t>(rows * n), 4.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits.row(r);
    switch (r % 6) {
      case 0: {  // the maximum three times: the lowest of the three columns
        const float top = 100.0f + static_cast<float>(r);
        for (int i = 0; i < 3; ++i) row[rng.uniform_int(0, static_cast<int>(n - 1))] = top;
        break;
      }
      case 1:  // one value everywhere: column 0
        for (int64_t c = 0; c < n; ++c) row[c] = -FLT_MAX;
        break;
      case 2:
        row[rng.uniform_int(0, static_cast<int>(n - 1))] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 3:
        row[rng.uniform_int(0, static_cast<int>(n - 1))] = r % 12 == 3 ? INFINITY : -INFINITY;
        break;
      case 4:  // the maximum in the last column (the scalar tail where n % 4 != 0)
        row[n - 1] = 1000.0f;
        break;
      default:
        break;
    }
  }
  const std::vector<int64_t> want = argmax_rows(logits);

  // Rows `pad` floats into a [rows, pad + n + 3] buffer: ld = pad + n + 3.
  const int64_t ld = pad + n + 3;
  std::vector<float> host(static_cast<size_t>(rows * ld), 0.0f);
  for (int64_t r = 0; r < rows; ++r) std::copy(logits.row(r), logits.row(r) + n, host.begin() + r * ld + pad);
  Arena& a = test::arena();
  const DeviceTensor buffer = upload_f32(a, host.data(), rows, ld, DType::kF32, "logits buffer");
  const DeviceTensor view(static_cast<float*>(buffer.data) + pad, DType::kF32, rows, n, ld);
  const DeviceTensor picked = a.alloc_tensor(DType::kI32, 1, rows, "picked");
  poison(picked);
  row_argmax(view, picked.as<int32_t>(), nullptr);
  const std::vector<int32_t> got = download_i32(picked);
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)]) << "row " << r;
}

// ld = pad + n + 3: pad 0 with n ≡ 1 (mod 4) gives ld % 4 == 0, the float4 path.
INSTANTIATE_TEST_SUITE_P(Shapes, RowArgmaxTest,
                         ::testing::Values(ArgmaxCase{12, 163840 + 1, 0}, ArgmaxCase{12, 163840, 1},
                                           ArgmaxCase{64, 4097, 0}, ArgmaxCase{7, 1001, 0}, ArgmaxCase{6, 7, 1},
                                           ArgmaxCase{1, 1, 0}));

}  // namespace
}  // namespace k3::cuda
