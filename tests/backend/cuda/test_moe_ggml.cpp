// GGUF expert kernels (quant/formats/ggml/cuda/moe_ggml.h) on fresh random inputs (the seed is printed;
// K3_TEST_SEED replays one). The GPU tests skip without a device (passed on the H200, 2026-11-29;
// the ring kernel at 2/3/4 rows per warp 2026-12-02).
//
// Without a GPU (these run in CI): the block traits (moe_ggml_blocks.h), compiled here for the host,
//   - value(): bit-identical to the exact CPU dequantisation (quant/formats/ggml) for every element of random
//     blocks, both quantised from floats and of random bytes;
//   - dot(unpack(), xload()): the sum over every part of every block, with activations prepared by
//     the CPU's own Int8Blocks contract (backend/cpu prepare_int8), against float64
//     Σ dequant(w) · code · scale; the integer sums are exact, so the error is fp32 rounding of a few
//     products and sums per part (≤ 1e-5 · S, S = Σ |w| · |code · scale|);
//   - bank and activation-buffer geometry, the rows per warp taken, and the shapes and types rejected.
// On the GPU: the quantisation kernel equals the CPU contract bit for bit (codes, scales, sums, from
// bf16 and f32 inputs); the decode GEMV (at each rows per warp it takes) against the same
// float64 reference, ≤ 2e-5 · S (fp32 order: lanes, warp reduction) plus 2^-8·|ref| for bf16 output;
// every slice of weight rows per CTA gives the same outputs bit for bit; the prefill GEMM against
// float64 over the bf16-rounded exact weights and the bf16 activations (2e-5 · S + output rounding);
// the rows dequantised to bf16 equal bf16(the CPU dequant) bit for bit, padding untouched; the
// one-expert dequantised product (cuBLASLt over bf16 chunks, the last partial) against the same
// float64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "backend/cpu/kernels/weight_matrix.h"
#include "backend/cuda/moe/moe.h"
#include "quant/formats/ggml/cuda/moe_ggml.h"
#include "quant/formats/ggml/cuda/moe_ggml_tuning.h"
#include "quant/formats/ggml/cuda/moe_ggml_blocks.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/upload.h"
#include "core/numeric.h"
#include "cuda_test_util.h"
#include "moe_test_util.h"
#include "quant/formats/ggml/ggml_dequant.h"
#include "quant/formats/ggml/ggml_quantize.h"

namespace k3::cuda {
namespace {

namespace gb = ggml_blocks;

constexpr GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                               GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// Rows of K values as GGUF blocks: quantised from normal floats (a few rows scaled far up or down)
// where k3 has a quantiser, else (Q5_K, or `random_bytes`) random bytes with finite f16 scales.
std::vector<uint8_t> random_rows(test::Rng& rng, GgmlType type, int64_t rows, int64_t k, bool random_bytes = false) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (!random_bytes && ggml_has_quantize(type)) {
    std::vector<float> x = rng.normal(static_cast<size_t>(rows * k));
    for (int64_t r = 0; r < rows; ++r) {
      const float s = r % 7 == 3 ? 1e3f : r % 7 == 5 ? 1e-3f : 1.0f;
      for (int64_t i = 0; i < k; ++i) x[r * k + i] *= s;
    }
    return quantize_tensor(type, x, static_cast<uint64_t>(k));
  }
  std::vector<uint8_t> b(static_cast<size_t>(rows * (k / info.block_size) * info.type_size));
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng.uniform_int(0, 255));
  std::vector<int> f16_fields;
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q8_0: f16_fields = {0}; break;
    case GgmlType::Q2_K: f16_fields = {80, 82}; break;
    case GgmlType::Q3_K: f16_fields = {108}; break;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: f16_fields = {0, 2}; break;
    case GgmlType::Q6_K: f16_fields = {208}; break;
    default: break;
  }
  for (size_t blk = 0; blk < b.size(); blk += info.type_size) {
    for (int off : f16_fields) {
      const uint16_t h = encode_f16(static_cast<float>(rng.uniform(1, -0.05f, 0.05f)[0]));
      std::memcpy(&b[blk + static_cast<size_t>(off)], &h, 2);
    }
  }
  return b;
}

std::vector<float> dequant_rows(GgmlType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t k) {
  std::vector<float> w(static_cast<size_t>(rows * k));
  dequantize_row(type, bytes.data(), w.data(), rows * k);
  return w;
}

// The CPU's activation contract for `type` (ggml_matrix: Int8Blocks, the format's block), rows [m, k].
struct HostActs {
  cpu::PreparedActivations p;
  std::vector<int16_t> s16;
  int64_t block = 0;
  double value(int64_t t, int64_t i) const {
    return static_cast<double>(p.q[t * p.k + i]) * p.scale[t * (p.k / block) + i / block];
  }
};
HostActs host_acts(GgmlType type, const std::vector<float>& x, int64_t m, int64_t k) {
  HostActs a;
  a.block = ggml_type_info(type).block_size;
  cpu::prepare_int8(x.data(), m, k, a.block, cpu::ActivationForm::Int8Blocks, a.p);
  a.s16.assign(a.p.sums.begin(), a.p.sums.end());
  return a;
}

// ---- block traits on the host (no GPU) ----------------------------------------------------------------

TEST(MoeGgmlBlocks, ValuesAndRunsOfEightEqualTheCpuDequantBitForBit) {
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  for (GgmlType type : kTypes) {
    for (bool bytes : {false, true}) {
      SCOPED_TRACE(std::string(ggml_type_name(type)) + (bytes ? " random bytes" : " quantised"));
      const int64_t rows = 5, k = 512;
      const std::vector<uint8_t> b = random_rows(rng, type, rows, k, bytes);
      const std::vector<float> ref = dequant_rows(type, b, rows, k);
      int64_t bad = 0;
      gb::visit(type, [&](auto trait) {
        using F = decltype(trait);
        for (int64_t i = 0; i < rows * k; ++i) {
          const float got = F::value(b.data() + i / F::kBlock * F::kBytes, static_cast<int>(i % F::kBlock));
          if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(ref[static_cast<size_t>(i)]) && ++bad <= 5) {
            ADD_FAILURE() << "element " << i << ": " << got << " vs " << ref[static_cast<size_t>(i)];
          }
        }
        for (int64_t i = 0; i < rows * k; i += 8) {  // decode8: the same values, eight at a time
          float got[8];
          F::decode8(b.data() + i / F::kBlock * F::kBytes, static_cast<int>(i % F::kBlock), got);
          for (int j = 0; j < 8; ++j) {
            const float want = ref[static_cast<size_t>(i + j)];
            if (std::bit_cast<uint32_t>(got[j]) != std::bit_cast<uint32_t>(want) && ++bad <= 5) {
              ADD_FAILURE() << "decode8 element " << i + j << ": " << got[j] << " vs " << want;
            }
          }
        }
      });
      EXPECT_EQ(bad, 0);
    }
  }
}

TEST(MoeGgmlBlocks, PartDotsWithTheCpuActivationContractMatchFloat64) {
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  for (GgmlType type : kTypes) {
    for (bool bytes : {false, true}) {
      SCOPED_TRACE(std::string(ggml_type_name(type)) + (bytes ? " random bytes" : " quantised"));
      const int64_t rows = 6, k = 768, m = 3;
      const std::vector<uint8_t> b = random_rows(rng, type, rows, k, bytes);
      const std::vector<float> w = dequant_rows(type, b, rows, k);
      std::vector<float> x = rng.normal(static_cast<size_t>(m * k));
      std::fill_n(x.begin() + k, 256, 0.0f);  // an all-zero activation block (scale 0)
      const HostActs a = host_acts(type, x, m, k);
      gb::visit(type, [&](auto trait) {
        using F = decltype(trait);
        const int64_t nb = k / F::kBlock, row_bytes = nb * F::kBytes;
        for (int64_t t = 0; t < m; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            float got = 0.0f;
            for (int64_t blk = 0; blk < nb; ++blk) {
              const gb::ActBlock xb{a.p.q.data() + t * k + blk * F::kBlock, a.s16.data() + t * (k / 16) + blk * (F::kBlock / 16),
                                    a.p.scale[static_cast<size_t>(t * nb + blk)]};
              for (int p = 0; p < F::kParts; ++p) {
                const uint8_t* wb = b.data() + r * row_bytes + blk * F::kBytes;
                got += F::dot(F::unpack(wb, p), F::xload(xb, p));
              }
            }
            double ref = 0, s = 0;
            for (int64_t i = 0; i < k; ++i) {
              const double v = static_cast<double>(w[static_cast<size_t>(r * k + i)]) * a.value(t, i);
              ref += v;
              s += std::fabs(v);
            }
            EXPECT_LE(std::fabs(got - ref), 1e-5 * s + 1e-30) << "token " << t << " row " << r << ": " << got << " vs " << ref;
          }
        }
      });
    }
  }
}

TEST(MoeGgmlBank, GeometryAndRejectedShapes) {
  EXPECT_TRUE(moe_ggml_supported(GgmlType::Q4_K));
  EXPECT_TRUE(moe_ggml_supported(GgmlType::Q2_K));
  EXPECT_FALSE(moe_ggml_supported(GgmlType::Q4_1));
  EXPECT_FALSE(moe_ggml_supported(GgmlType::F16));
  MoeGgmlBank b;
  b.type = GgmlType::Q4_K, b.experts = 896, b.n = 6144, b.k = 3584;
  EXPECT_EQ(b.row_bytes(), 14 * 144);
  EXPECT_EQ(b.bytes(), size_t{896} * 6144 * 14 * 144);
  b.type = GgmlType::Q2_K;
  EXPECT_EQ(b.row_bytes(), 14 * 84);
  EXPECT_THROW(moe_ggml_check_shape(GgmlType::Q4_K, 8, 64, 96, "t"), Error);  // K not a block multiple
  EXPECT_THROW(moe_ggml_check_shape(GgmlType::Q4_1, 8, 64, 256, "t"), Error);
  EXPECT_THROW(moe_ggml_check_shape(GgmlType::Q8_0, 0, 64, 256, "t"), Error);
  moe_ggml_check_shape(GgmlType::Q8_0, 8, 3, 96, "t");

  // Activation buffers: codes, scales, sums, each 256-byte aligned, back to back, inside the bytes.
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q6_K}) {
    const int64_t rows = 7, k = 768, block = ggml_type_info(type).block_size;
    auto* base = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);  // never dereferenced
    const MoeGgmlActs a = moe_ggml_acts_view(base, type, rows, k);
    const size_t bytes = moe_ggml_acts_bytes(type, rows, k);
    EXPECT_EQ(a.block, block);
    const auto at = [&](const void* p) { return static_cast<size_t>(static_cast<const uint8_t*>(p) - base); };
    EXPECT_EQ(at(a.q), 0u);
    EXPECT_GE(at(a.scale), static_cast<size_t>(rows * k));
    EXPECT_GE(at(a.sums), at(a.scale) + static_cast<size_t>(rows * (k / block)) * 4);
    EXPECT_LE(at(a.sums) + static_cast<size_t>(rows * (k / 16)) * 2, bytes);
    EXPECT_EQ(at(a.scale) % 256, 0u);
    EXPECT_EQ(at(a.sums) % 256, 0u);
  }
  EXPECT_THROW(moe_ggml_acts_view(reinterpret_cast<void*>(uintptr_t{1} << 20 | 16), GgmlType::Q4_K, 1, 256), Error);
}

TEST(MoeGgmlBank, KernelsAndRowsPerWarp) {
  for (GgmlType type : kTypes) {
    SCOPED_TRACE(ggml_type_name(type));
    for (int rw : {2, 3, 4}) EXPECT_TRUE(moe_ggml_gemv_supports(type, rw)) << rw;
    for (int rw : {0, 1, 5, 6, 8, 16, -4}) EXPECT_FALSE(moe_ggml_gemv_supports(type, rw)) << rw;
    EXPECT_TRUE(moe_ggml_gemv_supports(type, moe_ggml_gemv_rows_per_warp(type, 3584)));
  }
  // Kimi-K3: the most rows per warp (4, 3, 2) at which two stages of whole rows fit, else 2.
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q4_K, 3584), 3);  // rows of 2016 bytes
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q4_0, 3584), 3);
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q4_K, 3072), 4);
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q2_K, 3584), 4);
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q3_K, 3584), 4);
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q5_K, 3584), 2);
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q5_K, 3072), 3);
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q6_K, 3072), 2);
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q8_0, 3584), 2);  // no whole rows at 2 either
  // At token chunk 1 the ring is 75 KB, not 113: Q2_K's four rows still fit whole.
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q2_K, 3584, 1), 4);  // 8 warps × 2 stages × 4 × 1200 B: exactly
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q2_K, 3072, 1), 4);
  EXPECT_EQ(moe_ggml_gemv_rows_per_warp(GgmlType::Q2_K, 7168, 1), 2);
  // The one-token kernel for a routed Q2_K bank where at most one row falls on every two experts.
  EXPECT_TRUE(moe_ggml_gemv_one_token(GgmlType::Q2_K));
  EXPECT_EQ(moe_ggml_gemv_token_chunk(GgmlType::Q2_K, 16, 896), 1);  // Kimi-K3, 1 token a step
  EXPECT_EQ(moe_ggml_gemv_token_chunk(GgmlType::Q2_K, 448, 896), 1);  // 28 tokens
  EXPECT_EQ(moe_ggml_gemv_token_chunk(GgmlType::Q2_K, 464, 896), 4);  // 29 tokens
  EXPECT_EQ(moe_ggml_gemv_token_chunk(GgmlType::Q2_K, 128, 256), 1);  // Kimi-Linear (top-8), 16 tokens
  EXPECT_EQ(moe_ggml_gemv_token_chunk(GgmlType::Q2_K, 136, 256), 4);
  EXPECT_EQ(moe_ggml_gemv_token_chunk(GgmlType::Q2_K, 1, 1), 4);  // a dense linear
  for (GgmlType type : kTypes) {
    if (type == GgmlType::Q2_K) continue;
    EXPECT_FALSE(moe_ggml_gemv_one_token(type)) << ggml_type_name(type);
    EXPECT_EQ(moe_ggml_gemv_token_chunk(type, 16, 896), 4) << ggml_type_name(type);
  }
  // Decode GEMV or prefill GEMM, Kimi-K3 (896 experts, top-16): 512 / 1024 / 2048 / 4096 tokens, the
  // faster kernel of each type as measured on the H200 (docs/performance.md, 2026-12-02).
  const int64_t E = 896, N = 6144;
  for (GgmlType type : kTypes) {
    SCOPED_TRACE(ggml_type_name(type));
    const bool gemm_at_1024 = type == GgmlType::Q2_K || type == GgmlType::Q3_K || type == GgmlType::Q6_K ||
                              type == GgmlType::Q8_0;
    const bool m64_at_4096 = type == GgmlType::Q3_K || type == GgmlType::Q4_K || type == GgmlType::Q5_K;
    EXPECT_EQ(moe_ggml_tile_for(type, 16, E, N), MoeTile::kM16);
    EXPECT_EQ(moe_ggml_tile_for(type, 512 * 16, E, N), MoeTile::kM16);
    EXPECT_EQ(moe_ggml_tile_for(type, 1024 * 16, E, N), gemm_at_1024 ? MoeTile::kM64 : MoeTile::kM16);
    EXPECT_EQ(moe_ggml_tile_for(type, 2048 * 16, E, N), MoeTile::kM64);
    EXPECT_EQ(moe_ggml_tile_for(type, 4096 * 16, E, N), m64_at_4096 ? MoeTile::kM64 : MoeTile::kM128);
    EXPECT_EQ(moe_ggml_tile_for(type, 8192 * 16, E, N), MoeTile::kM128);
    EXPECT_EQ(moe_ggml_tile_for(type, 4096 * 16, E, 126), MoeTile::kM16);  // N % 8 != 0: the GEMV
  }
  EXPECT_FALSE(moe_ggml_gemv_supports(GgmlType::Q4_1, 4));
  EXPECT_FALSE(moe_ggml_gemv_supports(GgmlType::F16, 4));
  // The GEMV's weight rows per CTA on 132 SMs (one wave: 264 CTAs): a routed layer keeps the most;
  // one expert takes the fewest row groups that fit one wave: N 4096 one group (128, 171 or 256
  // CTAs), N 12288 at 2 rows per warp three (256 CTAs, where one group would give 768), N 16384 two
  // (256), N 32768 four (256); lm_head keeps 128; a bound of 2 tiles counts twice.
  EXPECT_EQ(moe_ggml_gemv_slice_rows(4, 6144, 16, 132), 128);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(3, 3584, 16, 132), 120);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(4, 4096, 1, 132), 32);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(3, 4096, 1, 132), 24);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(2, 4096, 1, 132), 16);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(2, 12288, 1, 132), 48);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(4, 16384, 1, 132), 64);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(4, 32768, 1, 132), 128);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(4, 163840, 1, 132), 128);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(4, 4096, 2, 132), 32);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(3, 12288, 2, 132), 96);
  // Token chunk 1: a wave of three CTAs per SM (396).
  EXPECT_EQ(moe_ggml_gemv_slice_rows(4, 6144, 16, 132, 1), 128);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(4, 4096, 1, 132, 1), 32);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(2, 12288, 1, 132, 1), 32);
  EXPECT_EQ(moe_ggml_gemv_slice_rows(4, 32768, 1, 132, 1), 96);

  auto* base = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);  // never dereferenced: the check comes first
  MoeGgmlBank b;
  b.type = GgmlType::Q4_0, b.experts = 4, b.n = 8, b.k = 64, b.data = base;
  const MoeDispatch d = moe_dispatch_view(base, 2, 2, 4);
  const MoeGgmlActs acts = moe_ggml_acts_view(base, GgmlType::Q4_0, 4, 64);
  const DeviceTensor xs(base, DType::kBF16, 4, 64), ys(base, DType::kF32, 4, 8);
  try {
    moe_grouped_gemv_ggml(xs, b, d, acts, ys, nullptr, 5);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "moe_grouped_gemv_ggml: rows per warp must be 2, 3 or 4, got 5");
  }
  try {
    moe_grouped_gemv_ggml(xs, b, d, acts, ys, nullptr, 2, 0, 3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "moe_grouped_gemv_ggml: token chunk must be 1 or 4, got 3");
  }
  try {
    moe_grouped_gemv_ggml(xs, b, d, acts, ys, nullptr, 2, 0, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "moe_grouped_gemv_ggml: no token chunk 1 for q4_0 (q2_K only)");
  }
}

// ---- GPU -------------------------------------------------------------------------------------------

using Routing = test::PickMode;
using Case = test::RoutedCase;
using test::make_routed;
using test::Routed;

// A bank of random GGML rows on the device (uploaded expert by expert) and their exact float values.
struct RandomBank {
  MoeGgmlBank bank;
  std::vector<float> w;
};
RandomBank random_bank(test::Rng& rng, GgmlType type, int64_t E, int64_t N, int64_t K) {
  const std::vector<uint8_t> bytes = random_rows(rng, type, E * N, K);
  RandomBank r{moe_ggml_alloc(test::arena(), type, E, N, K, "bank"), dequant_rows(type, bytes, E * N, K)};
  for (int64_t e = 0; e < E; ++e) moe_ggml_upload_rows(r.bank, e * N, bytes.data() + e * N * r.bank.row_bytes(), N);
  return r;
}

// Codes, scales and sums on the device equal the CPU contract's.
void expect_acts_equal(const MoeGgmlActs& got, const HostActs& want) {
  const auto bytes = [](const void* p, size_t n) {
    return download_bytes(DeviceTensor(const_cast<void*>(p), DType::kU8, 1, static_cast<int64_t>(n)));
  };
  const std::vector<uint8_t> q = bytes(got.q, want.p.q.size());
  const std::vector<uint8_t> sc = bytes(got.scale, want.p.scale.size() * 4);
  const std::vector<uint8_t> sums = bytes(got.sums, want.s16.size() * 2);
  EXPECT_EQ(std::memcmp(q.data(), want.p.q.data(), q.size()), 0) << "codes";
  EXPECT_EQ(std::memcmp(sc.data(), want.p.scale.data(), sc.size()), 0) << "scales";
  EXPECT_EQ(std::memcmp(sums.data(), want.s16.data(), sums.size()), 0) << "sums";
}

class MoeGgmlGemvTest : public ::testing::TestWithParam<Case> {};

TEST_P(MoeGgmlGemvTest, MatchesFloat64WithTheCpuActivationContract) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const Case c = GetParam();
  SCOPED_TRACE("T " + std::to_string(c.tokens) + " k " + std::to_string(c.top_k) + " E " + std::to_string(c.experts) +
               " N " + std::to_string(c.n) + " K " + std::to_string(c.k) + ", seed " + std::to_string(rng.seed()));
  const int64_t E = c.experts, N = c.n, K = c.k, R = c.tokens * c.top_k;
  Arena& a = test::arena();
  const Routed s = make_routed(rng, c);
  for (GgmlType type : kTypes) {
    SCOPED_TRACE(ggml_type_name(type));
    const auto [bank, w] = random_bank(rng, type, E, N, K);
    const HostActs ha = host_acts(type, s.xs_host, R, K);
    const MoeGgmlActs acts = moe_ggml_acts_view(a.alloc(moe_ggml_acts_bytes(type, R, K), "acts"), type, R, K);

    // f32 input to the quantiser: the same contract.
    const DeviceTensor xs32 = upload_f32(a, s.xs_host.data(), R, K, DType::kF32, "xs f32");
    moe_ggml_quantize(xs32, acts, nullptr);
    expect_acts_equal(acts, ha);

    const test::MoeReference ref = test::moe_reference(
        s.off, N, K, [&](int64_t r, int64_t i) { return ha.value(r, i); }, w, [](int64_t, int64_t) { return 1.0; });
    for (int rows_per_warp : {2, 3, 4}) {
      ASSERT_TRUE(moe_ggml_gemv_supports(type, rows_per_warp));
      for (DType out : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(std::string("out ") + dtype_name(out) + ", rows per warp " + std::to_string(rows_per_warp));
        const DeviceTensor ys = a.alloc_tensor(out, R, N, "ys");
        poison(ys);
        moe_grouped_gemv_ggml(s.xs, bank, s.d, acts, ys, nullptr, rows_per_warp);
        expect_acts_equal(acts, ha);  // from the bf16 rows
        const std::vector<float> got = download_f32(ys);
        test::expect_within_reference(got, ref, N, out, 2e-5);
        if (out == DType::kF32) {  // the routing weights in the epilogue
          const test::RowWeights rw = test::random_row_weights(rng, R);
          moe_grouped_gemv_ggml(acts, bank, moe_weighted(s.d, rw.device), ys, nullptr, rows_per_warp);
          test::expect_row_weighted(download_f32(ys), got, rw, N);
        }
        // Both token chunks at every slice of weight rows per CTA, from one row group per warp to the
        // most: bit for bit.
        const int group = 8 * rows_per_warp;
        for (int chunk : {1, 4}) {
          if (chunk == 1 && !moe_ggml_gemv_one_token(type)) continue;
          for (int slice = group; slice <= 128; slice += group) {
            SCOPED_TRACE("token chunk " + std::to_string(chunk) + ", slice " + std::to_string(slice));
            poison(ys);
            moe_grouped_gemv_ggml(acts, bank, s.d, ys, nullptr, rows_per_warp, slice, chunk);
            EXPECT_EQ(download_f32(ys), got);
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeGgmlGemvTest,
    ::testing::Values(Case{1, 8, 64, 256, 512, Routing::kDistinct},    // decode: one row per expert
                      Case{3, 4, 16, 130, 768, Routing::kRepeats},     // N % 128 != 0; part of a warp step
                      Case{8, 16, 40, 64, 3584, Routing::kSubset},     // K3 width: 3.5 warp steps
                      Case{40, 6, 3, 96, 1024, Routing::kRepeats},     // > 16 rows per expert: several tiles
                      Case{2, 3, 5, 126, 256, Routing::kRepeats}),     // N % 4 != 0: a warp's last rows clamp
    test::CaseIndexName());

// The prefill GEMM against float64 over the bf16-rounded exact dequantisation, both tile heights and
// output types, on shapes with partial n-tiles, empty experts and an expert of several m-tiles.
TEST(MoeGgmlGpu, PrefillGemmMultipliesTheBf16RoundedWeights) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  for (const Case& c : {Case{24, 2, 12, 48, 512, Routing::kSubset}, Case{150, 3, 5, 136, 768, Routing::kRepeats}}) {
    const int64_t E = c.experts, N = c.n, K = c.k, R = c.tokens * c.top_k;
    SCOPED_TRACE("E " + std::to_string(E) + ", N " + std::to_string(N) + ", K " + std::to_string(K));
    Arena& a = test::arena();
    const Routed s = make_routed(rng, c);
    for (GgmlType type : kTypes) {
      SCOPED_TRACE(ggml_type_name(type));
      const auto [bank, w] = random_bank(rng, type, E, N, K);
      const test::MoeReference ref = test::moe_reference(
          s.off, N, K,
          [&](int64_t r, int64_t i) { return static_cast<double>(s.xs_host[static_cast<size_t>(r * K + i)]); },
          test::round_bf16(w), [](int64_t, int64_t) { return 1.0; });
      for (MoeTile tile : {MoeTile::kM64, MoeTile::kM128}) {
        for (DType out : {DType::kF32, DType::kBF16}) {
          SCOPED_TRACE(std::string("tile ") + std::to_string(moe_tile_rows(tile)) + ", out " + dtype_name(out));
          const DeviceTensor ys = a.alloc_tensor(out, R, N, "ys");
          poison(ys);
          moe_grouped_gemm_ggml(s.xs, bank, s.d, ys, nullptr, tile);
          const std::vector<float> got = download_f32(ys);
          test::expect_within_reference(got, ref, N, out, 2e-5);
          if (out == DType::kF32) {  // the routing weights in the epilogue
            const test::RowWeights rw = test::random_row_weights(rng, R);
            moe_grouped_gemm_ggml(s.xs, bank, moe_weighted(s.d, rw.device), ys, nullptr, tile);
            test::expect_row_weighted(download_f32(ys), got, rw, N);
          }
        }
      }
    }
  }
}

// Rows of a bank dequantised to bf16 (across an expert boundary, into rows with padding) are the exact
// dequantisation rounded to bf16, bit for bit; the padding is left alone.
TEST(MoeGgmlGpu, DequantizedRowsAreTheBf16RoundedExactValues) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t E = 2, N = 40, K = 768, row0 = 28, rows = 24, ld = K + 8;
  for (GgmlType type : kTypes) {
    SCOPED_TRACE(ggml_type_name(type));
    const auto [bank, w] = random_bank(rng, type, E, N, K);
    const DeviceTensor out(test::arena().alloc_tensor(DType::kBF16, rows, ld, "out").data, DType::kBF16, rows, K, ld);
    K3_CUDA_CHECK(cudaMemset(out.data, 0xFF, static_cast<size_t>(rows * ld * 2)));
    moe_ggml_dequantize_rows(bank, row0, out, nullptr);
    const std::vector<uint8_t> got = download_bytes(DeviceTensor(out.data, DType::kU8, rows, ld * 2));
    int64_t wrong = 0, pad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < ld; ++i) {
        uint16_t v;
        std::memcpy(&v, &got[static_cast<size_t>((r * ld + i) * 2)], 2);
        if (i >= K) {
          pad += v != 0xFFFF;
        } else {
          wrong += v != encode_bf16(w[static_cast<size_t>((row0 + r) * K + i)]);
        }
      }
    }
    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(pad, 0);
  }
  const auto [bank, w] = random_bank(rng, GgmlType::Q4_K, E, N, K);
  const DeviceTensor past = test::arena().alloc_tensor(DType::kBF16, 16, K, "past the bank");
  EXPECT_THROW(moe_ggml_dequantize_rows(bank, 70, past, nullptr), Error);
  EXPECT_THROW(moe_ggml_dequantize_rows(bank, 0, test::arena().alloc_tensor(DType::kF32, 4, K, "f32"), nullptr), Error);
}

// A dense linear's bank of one expert by cuBLASLt over its dequantised weight, in chunks of 256 rows
// (the last partial), against float64 over the bf16-rounded exact values (the prefill GEMM's contract).
TEST(MoeGgmlGpu, DenseGemmMultipliesTheBf16RoundedWeightsChunkByChunk) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const Case c{72, 1, 1, 600, 512, Routing::kSubset};
  const int64_t N = c.n, K = c.k, R = c.tokens;
  Arena& a = test::arena();
  Blas blas(a);
  const Routed s = make_routed(rng, c);
  for (GgmlType type : kTypes) {
    SCOPED_TRACE(ggml_type_name(type));
    const auto [bank, w] = random_bank(rng, type, 1, N, K);
    const test::MoeReference ref = test::moe_reference(
        s.off, N, K,
        [&](int64_t r, int64_t i) { return static_cast<double>(s.xs_host[static_cast<size_t>(r * K + i)]); },
        test::round_bf16(w), [](int64_t, int64_t) { return 1.0; });
    for (DType out : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(std::string("out ") + dtype_name(out));
      const DeviceTensor ys = a.alloc_tensor(out, R, N, "ys");
      poison(ys);
      moe_ggml_dense_gemm(blas, a, s.xs, bank, ys, nullptr, size_t{256} * K * 2);
      test::expect_within_reference(download_f32(ys), ref, N, out, 2e-5);
    }
    EXPECT_TRUE(moe_ggml_dense_gemm_for(bank, s.d) == (R >= kGgmlDenseGemmRows));
  }
  const auto [bank3, w3] = random_bank(rng, GgmlType::Q4_K, 3, 64, K);
  EXPECT_THROW(moe_ggml_dense_gemm(blas, a, s.xs, bank3, a.alloc_tensor(DType::kF32, R, 64, "ys"), nullptr), Error);
}

TEST(MoeGgmlGpu, PrefillGemmRefusesTheDecodeTileAndBadShapes) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const Case c{4, 2, 4, 32, 256, Routing::kSubset};
  Arena& a = test::arena();
  const Routed s = make_routed(rng, c);
  const MoeGgmlBank bank = moe_ggml_alloc(a, GgmlType::Q4_K, c.experts, c.n, c.k, "bank");
  const int64_t R = c.tokens * c.top_k;
  const DeviceTensor ys = a.alloc_tensor(DType::kF32, R, c.n, "ys");
  EXPECT_THROW(moe_grouped_gemm_ggml(s.xs, bank, s.d, ys, nullptr, MoeTile::kM16), Error);
  const DeviceTensor narrow = a.alloc_tensor(DType::kF32, R, c.n - 8, "narrow ys");
  EXPECT_THROW(moe_grouped_gemm_ggml(s.xs, bank, s.d, narrow, nullptr), Error);
}

}  // namespace
}  // namespace k3::cuda
