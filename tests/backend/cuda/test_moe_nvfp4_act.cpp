// The NVFP4 W4A4 activation quantisation on the GPU (quant/formats/nvfp4/cuda/moe_nvfp4_act.h) against the CPU
// contract cpu::nvfp4_activation_values, bit for bit, on fresh random inputs (the seed is printed;
// K3_TEST_SEED replays one): sorted rows of a real moe_dispatch, one input_scale per expert (some
// powers of two, some not), blocks spanning 1e-7…1e4 in magnitude (e4m3 subnormal and saturated block
// scales), all-zero blocks, exact e2m1 ties, bf16 and f32 inputs. Also: every output value is exact in
// bf16 (the header's claim), and bad arguments are one-line errors. Skips without a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "quant/formats/nvfp4/cpu/nvfp4_matrix.h"
#include "backend/cuda/moe/moe.h"
#include "quant/formats/nvfp4/cuda/moe_nvfp4_act.h"
#include "backend/cuda/core/upload.h"
#include "core/numeric.h"
#include "cuda_test_util.h"

namespace k3::cuda {
namespace {

TEST(MoeNvfp4Act, MatchesTheCpuContractBitForBit) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Arena& a = test::arena();
  const int64_t T = 37, k = 4, E = 11, K = 16 * 40, R = T * k;
  std::vector<int32_t> ids(static_cast<size_t>(R));  // k distinct experts per token, from a random first one
  for (int64_t t = 0; t < T; ++t) {
    const int first = rng.uniform_int(0, static_cast<int>(E) - 1);
    for (int64_t j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = static_cast<int32_t>((first + j) % E);
  }
  const DeviceTensor dids = a.alloc_tensor(DType::kI32, T, k, "ids");
  copy_bytes_to_device(dids.data, ids.data(), ids.size() * sizeof(int32_t));
  const MoeDispatch d = moe_dispatch_view(a.alloc(moe_dispatch_bytes(T, k, E), "dispatch"), T, k, E);
  moe_dispatch(dids, d, nullptr);
  const std::vector<int32_t> off = download_i32(DeviceTensor(d.expert_offsets, DType::kI32, 1, E + 1));

  std::vector<float> scales(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    scales[static_cast<size_t>(e)] = e % 3 == 0 ? std::ldexp(1.0f, rng.uniform_int(-8, 4)) : rng.uniform(1, 0.003f, 3.0f)[0];
  }
  const DeviceTensor dscales = upload_f32(a, scales.data(), 1, E, DType::kF32, "input scales");

  std::vector<float> x = rng.normal(static_cast<size_t>(R * K));
  for (int64_t b = 0; b < R * K / 16; ++b) {
    const int kind = rng.uniform_int(0, 9);
    const float mag = std::pow(10.0f, rng.uniform(1, -7.0f, 4.0f)[0]);
    for (int64_t i = 16 * b; i < 16 * b + 16; ++i) {
      float& v = x[static_cast<size_t>(i)];
      if (kind == 0) v = 0.0f;                                                          // all-zero block
      else if (kind == 1) v = (i % 16 == 0 ? 6.0f : 0.25f * static_cast<float>(i % 24)) * mag;  // e2m1 ties
      else v *= mag;
    }
  }
  for (DType in : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(in == DType::kBF16 ? "bf16 in" : "f32 in");
    const std::vector<float> xin = in == DType::kBF16 ? test::round_bf16(x) : x;
    const DeviceTensor dx = upload_f32(a, xin.data(), R, K, in, "rows");
    const DeviceTensor out = a.alloc_tensor(DType::kBF16, R, K, "out");
    poison(out);
    moe_quantize_nvfp4_rows(dx, dscales.as<const float>(), d, out, nullptr);
    const std::vector<float> got = download_f32(out);
    int64_t bad = 0, inexact = 0;
    std::vector<float> want(static_cast<size_t>(K));
    for (int64_t r = 0; r < R; ++r) {
      int64_t e = 0;
      while (off[static_cast<size_t>(e + 1)] <= r) ++e;
      cpu::nvfp4_activation_values(&xin[static_cast<size_t>(r * K)], K, scales[static_cast<size_t>(e)], want.data());
      for (int64_t i = 0; i < K; ++i) {
        const float w = want[static_cast<size_t>(i)], g = got[static_cast<size_t>(r * K + i)];
        if (decode_bf16(encode_bf16(w)) != w) ++inexact;
        if (std::bit_cast<uint32_t>(g) != std::bit_cast<uint32_t>(decode_bf16(encode_bf16(w))) && ++bad <= 5) {
          ADD_FAILURE() << "row " << r << " (expert " << e << ") element " << i << ": " << g << " vs " << w;
        }
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(inexact, 0);
  }
}

TEST(MoeNvfp4Act, BadArgumentsAreOneLineErrors) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  Arena& a = test::arena();
  const MoeDispatch d = moe_dispatch_view(a.alloc(moe_dispatch_bytes(2, 2, 4), "dispatch"), 2, 2, 4);
  const float* scales = a.alloc_n<float>(4, "scales");
  const DeviceTensor x = a.alloc_tensor(DType::kBF16, 4, 40, "x");  // K not a multiple of 16
  const DeviceTensor out = a.alloc_tensor(DType::kBF16, 4, 40, "out");
  try {
    moe_quantize_nvfp4_rows(x, scales, d, out, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("moe_quantize_nvfp4_rows: K a multiple of 16"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  const DeviceTensor x3 = a.alloc_tensor(DType::kBF16, 3, 32, "x3");
  const DeviceTensor o3 = a.alloc_tensor(DType::kBF16, 3, 32, "o3");
  EXPECT_THROW(moe_quantize_nvfp4_rows(x3, scales, d, o3, nullptr), Error);  // 3 rows, dispatch has 4
}

}  // namespace
}  // namespace k3::cuda
