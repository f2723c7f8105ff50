// FP8-block expert GEMM (quant/formats/fp8/cuda/moe_fp8_block.h) on fresh random inputs (the seed is
// printed; K3_TEST_SEED replays one). Without a GPU (CI): the shapes the bank refuses, with the
// caller named. On the GPU: over random e4m3 codes (every finite code) and block multipliers spread
// over 2^±12, the GEMM equals, bit for bit, the bf16 grouped GEMM over the bank dequantised on the
// host and rounded to bf16 (the uploader's bf16 path) — every tile height, and at kM16 both the tile
// and the decode kernel, f32 and bf16 outputs, with and without routing weights, K a multiple of 8
// or 16 but not of 128 — and stays within fp32 summation error of the float64 product over those
// bf16 weights. Forcing the decode kernel where it does not fit is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "backend/cuda/core/upload.h"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/moe/moe_tiles.h"
#include "core/error.h"
#include "core/numeric.h"
#include "cuda_test_util.h"
#include "moe_test_util.h"
#include "quant/formats/fp8/cuda/moe_fp8_block.h"
#include "quant/formats/fp8/fp8.h"

namespace k3::cuda {
namespace {

TEST(MoeFp8Block, RefusesShapesOffItsBlocks) {
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{100, 256}, {256, 100}, {0, 256}, {256, 0}}) {
    try {
      moe_fp8_block_check_shape(4, n, k, "layer 3 experts");
      ADD_FAILURE() << "no error for N " << n << ", K " << k;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "layer 3 experts: an FP8-block expert bank needs N % 128 == 0 and K % 8 == 0, got 4 experts × [" +
                                           std::to_string(n) + ", " + std::to_string(k) + "]");
    }
  }
  EXPECT_NO_THROW(moe_fp8_block_check_shape(4, 384, 1000, "ok"));
}

// A bank of E experts [N, K]: random codes (no NaN), multipliers 2^u, u uniform in [−12, 12]; the
// device bank, uploaded per expert, and the host's exact f32 dequantisation.
struct RandomBank {
  MoeFp8BlockBank bank;
  std::vector<float> w;
};
RandomBank random_bank(test::Rng& rng, int64_t E, int64_t N, int64_t K) {
  RandomBank r{moe_fp8_block_alloc(test::arena(), E, N, K, "bank"), std::vector<float>(static_cast<size_t>(E * N * K))};
  const int64_t scale_count = N / kFp8ExpertBlock * r.bank.scale_cols();
  for (int64_t e = 0; e < E; ++e) {
    std::vector<uint8_t> codes(static_cast<size_t>(N * K));
    for (uint8_t& c : codes) {
      do c = static_cast<uint8_t>(rng.uniform_int(0, 255));
      while ((c & 0x7F) == 0x7F);
    }
    std::vector<float> scales = rng.uniform(static_cast<size_t>(scale_count), -12.0f, 12.0f);
    for (float& s : scales) s = std::exp2(s);
    moe_fp8_block_upload_rows(r.bank, e * N, codes.data(), scales.data(), N);
    dequant_fp8_block(codes.data(), scales.data(), N, K, kFp8ExpertBlock, kFp8ExpertBlock, &r.w[static_cast<size_t>(e * N * K)]);
  }
  return r;
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

TEST(MoeFp8BlockGpu, EqualsTheBf16GemmOverTheDequantisedBankBitForBit) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  using test::PickMode;
  for (const test::RoutedCase& c : {test::RoutedCase{1, 8, 64, 256, 512, PickMode::kDistinct},   // decode
                                    test::RoutedCase{40, 6, 3, 128, 1000, PickMode::kRepeats},   // K % 16 != 0; several m-tiles
                                    test::RoutedCase{9, 4, 6, 256, 1008, PickMode::kRepeats},    // K % 128 != 0
                                    test::RoutedCase{150, 3, 5, 384, 768, PickMode::kSubset}}) {  // empty experts
    const int64_t E = c.experts, N = c.n, K = c.k, R = c.tokens * c.top_k;
    SCOPED_TRACE("E " + std::to_string(E) + ", N " + std::to_string(N) + ", K " + std::to_string(K));
    Arena& a = test::arena();
    const test::Routed s = test::make_routed(rng, c);
    const RandomBank fp8 = random_bank(rng, E, N, K);
    const std::vector<float> w16 = test::round_bf16(fp8.w);
    const DeviceTensor bf16_bank = upload_f32(a, w16.data(), E * N, K, DType::kBF16, "bf16 bank");
    const test::MoeReference ref = test::moe_reference(
        s.off, N, K, [&](int64_t r, int64_t i) { return static_cast<double>(s.xs_host[static_cast<size_t>(r * K + i)]); },
        w16, [](int64_t, int64_t) { return 1.0; });
    const test::RowWeights rw = test::random_row_weights(rng, R);
    for (MoeTile tile : {MoeTile::kM16, MoeTile::kM64, MoeTile::kM128}) {
      for (DType out : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(std::string("tile ") + std::to_string(moe_tile_rows(tile)) + ", out " + dtype_name(out));
        const DeviceTensor ys = a.alloc_tensor(out, R, N, "ys"), ys16 = a.alloc_tensor(out, R, N, "ys bf16 bank");
        for (bool weighted : {false, true}) {
          const MoeDispatch d = weighted ? moe_weighted(s.d, rw.device) : s.d;
          poison(ys16);
          moe_grouped_gemm_bf16(s.xs, bf16_bank, d, ys16, nullptr, tile);
          const std::vector<uint32_t> want = bits_of(download_f32(ys16));
          for (Fp8ExpertKernel kernel : {Fp8ExpertKernel::kTile, Fp8ExpertKernel::kDecode}) {
            if (kernel == Fp8ExpertKernel::kDecode && (tile != MoeTile::kM16 || K % 16 != 0)) continue;
            poison(ys);
            moe_grouped_gemm_fp8_block(s.xs, fp8.bank, d, ys, nullptr, tile, kernel);
            const std::vector<float> got = download_f32(ys);
            EXPECT_EQ(bits_of(got), want) << (weighted ? "weighted" : "plain") << ", kernel "
                                          << (kernel == Fp8ExpertKernel::kDecode ? "decode" : "tile");
            if (!weighted) test::expect_within_reference(got, ref, N, out, 2e-5);
          }
        }
      }
    }
  }
}

TEST(MoeFp8BlockGpu, RefusesAForeignDispatchPartialBlocksAndADecodeKernelThatDoesNotFit) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const test::Routed s = test::make_routed(rng, {4, 2, 4, 128, 256, test::PickMode::kSubset});
  Arena& a = test::arena();
  const MoeFp8BlockBank bank = moe_fp8_block_alloc(a, 5, 128, 256, "bank");
  const DeviceTensor ys = a.alloc_tensor(DType::kF32, 8, 128, "ys");
  EXPECT_THROW(moe_grouped_gemm_fp8_block(s.xs, bank, s.d, ys, nullptr), Error);  // 5 experts, dispatch 4
  const MoeFp8BlockBank four = moe_fp8_block_alloc(a, 4, 128, 256, "four");
  EXPECT_THROW(moe_grouped_gemm_fp8_block(s.xs, four, s.d, ys, nullptr, MoeTile::kM64, Fp8ExpertKernel::kDecode), Error);
  const test::Routed odd = test::make_routed(rng, {4, 2, 4, 128, 248, test::PickMode::kSubset});
  const MoeFp8BlockBank odd_k = moe_fp8_block_alloc(a, 4, 128, 248, "odd K");
  EXPECT_THROW(moe_grouped_gemm_fp8_block(odd.xs, odd_k, odd.d, ys, nullptr, MoeTile::kM16, Fp8ExpertKernel::kDecode), Error);
  const std::vector<uint8_t> codes(64 * 256);
  const std::vector<float> scales(2);
  EXPECT_THROW(moe_fp8_block_upload_rows(bank, 0, codes.data(), scales.data(), 64), Error);
  EXPECT_THROW(moe_fp8_block_upload_rows(bank, 64, codes.data(), scales.data(), 128), Error);
}

}  // namespace
}  // namespace k3::cuda
