// FP8 E4M3 activation quantisation: bit-exact with the project's producer rule (quant/formats/fp8
// quantize_fp8_block with 1×128 tiles; core/numeric.h encode_e4m3fn_sat) — codes and scales,
// and the scales in cuBLASLt's token-contiguous VEC128 layout.
#include <gtest/gtest.h>

#include <bit>

#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/ops/ops.h"
#include "quant/formats/fp8/cuda/fp8_quant.h"
#include "backend/cuda/core/upload.h"
#include "core/numeric.h"
#include "cuda_test_util.h"
#include "quant/formats/fp8/fp8.h"

namespace k3::cuda {
namespace {

// Rows × 128-blocks of very different magnitudes, some all-zero blocks, and values that land
// exactly on the saturation edge (the block's amax maps to 448).
std::vector<float> activations(test::Rng& rng, int64_t m, int64_t k, DType t) {
  std::vector<float> x = rng.normal(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b * 128 < k; ++b) {
      const int kind = rng.uniform_int(0, 9);
      const float s = kind == 0 ? 0.0f : std::ldexp(1.0f, rng.uniform_int(-20, 12));
      for (int64_t c = b * 128; c < std::min(k, b * 128 + 128); ++c) x[r * k + c] *= s;
    }
  }
  return t == DType::kBF16 ? test::round_bf16(x) : x;
}

class Quant1x128Test : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, DType>> {};

TEST_P(Quant1x128Test, BitExactWithProducerRule) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const auto [M, K, tin] = GetParam();
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const std::vector<float> x = activations(rng, M, K, tin);
  const int64_t kb = (K + 127) / 128;
  std::vector<uint8_t> q_ref(static_cast<size_t>(M * K));
  std::vector<float> s_ref(static_cast<size_t>(M * kb));
  quantize_fp8_block(x.data(), M, K, 1, 128, q_ref.data(), s_ref.data());

  Arena& a = test::arena();
  const DeviceTensor dx = upload_f32(a, x.data(), M, K, tin, "x");
  const DeviceTensor dq = a.alloc_tensor(DType::kE4M3, M, K, "q");
  const DeviceTensor ds = a.alloc_tensor(DType::kF32, kb, M, "scales");
  ASSERT_EQ(ds.numel(), fp8_1x128_scale_count(M, K));
  poison(dq);
  poison(ds);
  quantize_fp8_1x128(dx, dq, ds.as<float>(), nullptr);
  const std::vector<uint8_t> q = download_bytes(dq);
  const std::vector<float> s = download_f32(ds);
  int64_t bad_q = 0, bad_s = 0;
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t b = 0; b < kb; ++b) {
      // cuBLASLt VEC128_32F: the token index is contiguous.
      if (std::bit_cast<uint32_t>(s[b * M + r]) != std::bit_cast<uint32_t>(s_ref[r * kb + b])) {
        if (++bad_s <= 5) ADD_FAILURE() << "scale row " << r << " block " << b << ": " << s[b * M + r] << " vs " << s_ref[r * kb + b];
      }
    }
    for (int64_t c = 0; c < K; ++c) {
      if (q[r * K + c] != q_ref[r * K + c]) {
        if (++bad_q <= 5) ADD_FAILURE() << "code [" << r << ", " << c << "]: " << int(q[r * K + c]) << " vs " << int(q_ref[r * K + c]) << " (x = " << x[r * K + c] << ")";
      }
    }
  }
  EXPECT_EQ(bad_s, 0);
  EXPECT_EQ(bad_q, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Quant1x128Test,
                         ::testing::Values(std::make_tuple(1, 7168, DType::kBF16), std::make_tuple(7, 7168, DType::kF32),
                                           std::make_tuple(64, 12288, DType::kBF16),
                                           std::make_tuple(130, 1536, DType::kBF16),
                                           std::make_tuple(37, 7168, DType::kBF16),  // a part-filled warp and CTA
                                           std::make_tuple(9, 200, DType::kF32),  // a partial last block
                                           std::make_tuple(3, 384, DType::kBF16)));  // an odd block count

TEST(CudaFp8Quant, PaddingRowsAreZeroWithUnitScale) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t M = 5, Mq = 8, K = 1024, kb = K / 128;
  const std::vector<float> x = activations(rng, M, K, DType::kBF16);
  std::vector<uint8_t> q_ref(static_cast<size_t>(M * K));
  std::vector<float> s_ref(static_cast<size_t>(M * kb));
  quantize_fp8_block(x.data(), M, K, 1, 128, q_ref.data(), s_ref.data());
  Arena& a = test::arena();
  const DeviceTensor dx = upload_f32(a, x.data(), M, K, DType::kBF16, "x");
  const DeviceTensor dq = a.alloc_tensor(DType::kE4M3, Mq, K, "q");
  const DeviceTensor ds = a.alloc_tensor(DType::kF32, kb, Mq, "scales");
  poison(dq);
  poison(ds);
  quantize_fp8_1x128(dx, dq, ds.as<float>(), nullptr);
  const std::vector<uint8_t> q = download_bytes(dq);
  const std::vector<float> s = download_f32(ds);
  for (int64_t r = 0; r < Mq; ++r) {
    for (int64_t b = 0; b < kb; ++b) EXPECT_EQ(s[b * Mq + r], r < M ? s_ref[r * kb + b] : 1.0f) << r << " " << b;
    int64_t bad = 0;
    for (int64_t c = 0; c < K; ++c) bad += q[r * K + c] != (r < M ? q_ref[r * K + c] : 0);
    EXPECT_EQ(bad, 0) << "row " << r;
  }
  EXPECT_THROW(quantize_fp8_1x128(dx, dq.row_slice(0, 4), ds.as<float>(), nullptr), Error);
}

TEST(CudaFp8Quant, PerTensorStaticScale) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t M = 33, K = 1024;
  std::vector<float> x = rng.normal(static_cast<size_t>(M * K), 10.0f);
  x[5] = 1e6f;  // saturates to 448
  x[6] = -1e6f;
  const float scale = 0.037f;
  Arena& a = test::arena();
  for (DType t : {DType::kF32, DType::kBF16}) {
    const std::vector<float> xin = t == DType::kBF16 ? test::round_bf16(x) : x;
    const DeviceTensor dx = upload_f32(a, xin.data(), M, K, t, "x");
    const DeviceTensor ds = upload_f32(a, &scale, 1, 1, DType::kF32, "scale");
    const DeviceTensor dq = a.alloc_tensor(DType::kE4M3, M, K, "q");
    poison(dq);
    quantize_fp8_tensor(dx, ds.as<float>(), dq, nullptr);
    const std::vector<uint8_t> q = download_bytes(dq);
    int64_t bad = 0;
    for (size_t i = 0; i < q.size(); ++i) bad += q[i] != encode_e4m3fn_sat(xin[i] / scale);
    EXPECT_EQ(bad, 0) << dtype_name(t);
    EXPECT_EQ(q[5], 0x7E);
    EXPECT_EQ(q[6], 0xFE);
  }
}

}  // namespace
}  // namespace k3::cuda
