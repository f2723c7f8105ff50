// 4-bit expert GEMMs (backend/cuda/moe/moe_w4.h) on fresh random inputs (the seed is printed;
// K3_TEST_SEED replays one).
//
// Without a GPU (these run in CI too): the bank layout (moe_w4_layout.h) — slots tile the word and
// decode to sign | E2M1·2^-126 — and the repack: for every element of random NVFP4 / MXFP4 banks
// (negative, zero and subnormal E4M3 scales included) the operand the kernel forms from the repacked
// bytes, emulated bit for bit (slot decode × F from the stored scale byte), equals the exact
// reference dequantisation (quant/formats/nvfp4, quant/formats/mxfp4) × 2^-7 and is a bf16 value, so the GPU's
// bf16x2 multiply is exact.
//
// On the GPU: every kernel (kDecode / kDecode3 / kDecode8 and the kM16 tile kernel of the decode
// class, kM64 / kM128 / kWgmma prefill class, kAuto, and the tile classes' choice) against a float64 GEMM over the exactly
// dequantised weights and the same bf16 activations, times the per-expert output scale of the
// column's part; the decode kernel also on 1…16 rows per expert at both Kimi-K3 GEMM shapes, and in
// its split-K form (one expert at K = 7168 and 12288; forced split counts against whole K). The
// operands are exact, each product is exact in fp32, so the error is fp32 accumulation (≤ 2e-5·S,
// S = |scale|·Σ_k |x_k·w_k|, as the bf16 grouped GEMM's test) plus, for bf16 output, the final
// rounding (2^-8·|ref|).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cuda/moe/moe.h"
#include "backend/cuda/moe/moe_w4.h"
#include "backend/cuda/moe/moe_w4_tuning.h"
#include "backend/cuda/moe/moe_w4_layout.h"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/core/tensor_map.h"
#include "backend/cuda/core/upload.h"
#include "core/numeric.h"
#include "cuda_test_util.h"
#include "moe_test_util.h"
#include "quant/formats/mxfp4/mxfp4.h"
#include "quant/formats/nvfp4/nvfp4.h"

namespace k3::cuda {
namespace {

constexpr W4Format kFormats[] = {W4Format::kNvfp4, W4Format::kMxfp4};

// Checkpoint bytes of a random bank: codes uniform; NVFP4 scales E4M3 codes of magnitude 2^-9 … 448
// with some negative and zero ones, MXFP4 exponents 2^-125 … 2^8 and a few all-zero blocks at 2^-127.
struct Checkpoint {
  std::vector<uint8_t> codes, scales;
};

Checkpoint random_checkpoint(test::Rng& rng, W4Format f, int64_t rows, int64_t k) {
  const int64_t group = w4_group(f);
  Checkpoint c;
  c.codes.resize(static_cast<size_t>(rows * k / 2));
  c.scales.resize(static_cast<size_t>(rows * k / group));
  for (uint8_t& b : c.codes) b = static_cast<uint8_t>(rng.uniform_int(0, 255));
  for (size_t i = 0; i < c.scales.size(); ++i) {
    const int pick = rng.uniform_int(0, 31);
    if (f == W4Format::kNvfp4) {
      int code = rng.uniform_int(0x01, 0x7E);  // every finite positive magnitude, subnormals included
      if (pick == 0) code = 0;                 // zero scale
      if (pick == 1) code |= 0x80;             // negative scale
      c.scales[i] = static_cast<uint8_t>(code);
    } else if (pick == 0) {
      c.scales[i] = 0;  // 2^-127 with zero codes, as quantize_mxfp4 writes an all-zero block
      const int64_t row = static_cast<int64_t>(i) / (k / group), col = static_cast<int64_t>(i) % (k / group) * group;
      std::fill_n(c.codes.begin() + row * (k / 2) + col / 2, group / 2, 0);
    } else {
      c.scales[i] = static_cast<uint8_t>(rng.uniform_int(2, w4::kMxfp4MaxExponent));
    }
  }
  return c;
}

// Exact dequantisation of bank rows (no global scale).
std::vector<float> dequant(W4Format f, const Checkpoint& c, int64_t rows, int64_t k) {
  std::vector<float> w(static_cast<size_t>(rows * k));
  if (f == W4Format::kNvfp4) {
    dequant_nvfp4(c.codes.data(), c.scales.data(), 1.0f, rows, k, w.data());
  } else {
    dequant_mxfp4(c.codes.data(), c.scales.data(), rows, k, w.data());
  }
  return w;
}

float bf16_bits_value(uint32_t bits16) { return decode_bf16(static_cast<uint16_t>(bits16)); }

// ---- layout and repack (no GPU) --------------------------------------------------------------------

TEST(MoeW4Layout, SlotsTileTheWordAndDecodeToE2m1) {
  uint32_t seen = 0;
  for (int slot = 0; slot < 4; ++slot) {
    for (int h = 0; h < 2; ++h) {
      const uint32_t bits = w4::place_code(0xF, slot, h);
      EXPECT_EQ(std::popcount(bits), 4);
      EXPECT_EQ(seen & bits, 0u) << "slot " << slot << " half " << h;
      seen |= bits;
    }
  }
  EXPECT_EQ(seen, 0xFFFFFFFFu);
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  for (int it = 0; it < 2000; ++it) {
    uint32_t code[4][2], word = 0;
    for (int slot = 0; slot < 4; ++slot) {
      for (int h = 0; h < 2; ++h) {
        code[slot][h] = static_cast<uint32_t>(rng.uniform_int(0, 15));
        word |= w4::place_code(code[slot][h], slot, h);
      }
    }
    for (int slot = 0; slot < 4; ++slot) {
      const uint32_t v = w4::unpack_slot(word, slot);
      for (int h = 0; h < 2; ++h) {
        const double want = std::ldexp(static_cast<double>(decode_e2m1(static_cast<uint8_t>(code[slot][h]))), -126);
        const float got = bf16_bits_value(v >> (16 * h) & 0xFFFFu);
        ASSERT_EQ(static_cast<double>(got), want) << "slot " << slot << " code " << code[slot][h];
        ASSERT_EQ(std::signbit(got), code[slot][h] >= 8) << "slot " << slot << " code " << code[slot][h];
      }
    }
  }
}

// The kernel's operand for every element of a repacked bank, emulated on the host.
void check_emulated_operands(W4Format f, int64_t rows, int64_t k, test::Rng& rng) {
  const w4::FormatBits& fb = f == W4Format::kNvfp4 ? w4::kNvfp4Bits : w4::kMxfp4Bits;
  const Checkpoint c = random_checkpoint(rng, f, rows, k);
  const std::vector<float> ref = dequant(f, c, rows, k);
  std::vector<uint8_t> codes(c.codes.size(), 0xAA), scales(c.scales.size(), 0xAA);
  moe_w4_repack(f, c.codes.data(), c.scales.data(), rows, k, codes.data(), scales.data());
  const int64_t chunks = k / w4::kChunk;
  const int sbytes = w4::scale_bytes_per_chunk(fb);
  int64_t bad = 0;
  for (int64_t grp = 0; grp < rows / w4::kRowGroup; ++grp) {
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t tile = grp * chunks + ch;
      for (int lane = 0; lane < 32; ++lane) {
        for (int s = 0; s < 4; ++s) {
          uint32_t word = 0;
          std::memcpy(&word, &codes[static_cast<size_t>(tile * w4::kChunkCodeBytes + lane * 16 + s * 4)], 4);
          for (int slot = 0; slot < 4; ++slot) {
            const int r = w4::fragment_row(lane, slot);
            const int block = s * 16 / fb.group;
            const uint32_t byte = scales[static_cast<size_t>(tile * sbytes + w4::scale_byte_index(fb, r, block))];
            const uint32_t fbits = w4::scale_f_pair(fb.scale_mul, fb.scale_add, byte | (byte << 16));
            ASSERT_EQ(fbits & 0xFFFFu, fbits >> 16);
            const double scale_f = bf16_bits_value(fbits & 0xFFFFu);
            ASSERT_TRUE(std::isfinite(scale_f)) << "byte " << byte;
            for (int h = 0; h < 2; ++h) {
              const int64_t row = grp * w4::kRowGroup + r;
              const int64_t col = ch * w4::kChunk + 16 * s + w4::fragment_col(lane, slot, h);
              const double op = bf16_bits_value(w4::unpack_slot(word, slot) >> (16 * h) & 0xFFFFu) * scale_f;
              const double want = std::ldexp(static_cast<double>(ref[static_cast<size_t>(row * k + col)]), -w4::kOffsetLog2);
              const bool bf16_exact = static_cast<double>(test::round_bf16(static_cast<float>(op))) == op;
              if ((op != want || !bf16_exact) && ++bad <= 5) {
                ADD_FAILURE() << w4_format_name(f) << " row " << row << " col " << col << ": operand " << op
                              << " vs " << want << (bf16_exact ? "" : " (not a bf16 value)");
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(MoeW4Repack, EmulatedOperandsEqualReferenceDequant) {
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  for (W4Format f : kFormats) {
    check_emulated_operands(f, 48, 192, rng);
    check_emulated_operands(f, 16, 64, rng);
  }
}

TEST(MoeW4Repack, RejectsWhatTheKernelsCannotRepresent) {
  std::vector<uint8_t> codes(16 * 32, 0x11), out_codes(codes.size());
  std::vector<uint8_t> nv(16 * 4, 0x38), mx(16 * 2, 127), out_scales(64);
  moe_w4_repack(W4Format::kNvfp4, codes.data(), nv.data(), 16, 64, out_codes.data(), out_scales.data());
  moe_w4_repack(W4Format::kMxfp4, codes.data(), mx.data(), 16, 64, out_codes.data(), out_scales.data());
  nv[5] = 0x7F;  // NaN
  EXPECT_THROW(moe_w4_repack(W4Format::kNvfp4, codes.data(), nv.data(), 16, 64, out_codes.data(), out_scales.data()), Error);
  mx[3] = w4::kMxfp4MaxExponent + 1;  // 2^9
  EXPECT_THROW(moe_w4_repack(W4Format::kMxfp4, codes.data(), mx.data(), 16, 64, out_codes.data(), out_scales.data()), Error);
  mx[3] = 0xFF;
  EXPECT_THROW(moe_w4_repack(W4Format::kMxfp4, codes.data(), mx.data(), 16, 64, out_codes.data(), out_scales.data()), Error);
  EXPECT_THROW(moe_w4_repack(W4Format::kMxfp4, codes.data(), mx.data(), 8, 64, out_codes.data(), out_scales.data()), Error);
}

// The warpgroup-MMA kernel's activation map (tensor_map.h) refuses, before any driver call, what a
// 128-byte-swizzled box cannot read: one-line errors naming the tensor (no GPU needed).
TEST(TensorMap, RefusesTensorsTheSwizzledBoxCannotRead) {
  alignas(16) static unsigned char buf[4096];
  auto expect_refused = [](const DeviceTensor& t, int box_cols) {
    try {
      tensor_map_bf16_sw128(t, 16, box_cols, "test xs");
      ADD_FAILURE() << "accepted " << t.describe();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("test xs"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  expect_refused(DeviceTensor(buf, DType::kF32, 8, 64), 64);         // not bf16
  expect_refused(DeviceTensor(buf, DType::kBF16, 8, 64, 68), 64);    // rows not 16-byte aligned
  expect_refused(DeviceTensor(buf + 2, DType::kBF16, 8, 64), 64);    // base not 16-byte aligned
  expect_refused(DeviceTensor(buf, DType::kBF16, 8, 64), 32);        // box rows of 64 bytes
}

TEST(MoeW4Repack, KernelChoiceFollowsRowsPerExpert) {
  EXPECT_EQ(moe_w4_tile_for(16, 896), MoeTile::kM16);            // decode, one token
  EXPECT_EQ(moe_w4_tile_for(4096 * 16, 896), MoeTile::kM128);    // prefill
  EXPECT_EQ(moe_w4_tile_for(0, 8), MoeTile::kM16);
  for (W4Format f : kFormats) {
    // The decode class runs the 8-row decode kernel while experts average ≤ 2 rows, the 16-row one
    // above that, at the Kimi-K3 widths (both GEMMs), its 3-stage form where 5 stages do not fit K,
    // the split-K form of the one the rows pick past that, and the tile kernel where even 16 splits
    // do not fit (sm_90: 227 KB per block).
    EXPECT_EQ(moe_w4_kernel_for(MoeTile::kAuto, f, 16, 896, 3584), W4Kernel::kDecode8);
    EXPECT_EQ(moe_w4_kernel_for(MoeTile::kAuto, f, 64 * 16, 896, 3072), W4Kernel::kDecode8);
    EXPECT_EQ(moe_w4_kernel_for(MoeTile::kAuto, f, 512 * 16, 896, 3584), W4Kernel::kDecode);
    EXPECT_EQ(moe_w4_kernel_for(MoeTile::kM16, f, 3 * 896, 896, 4608), W4Kernel::kDecode3);
    EXPECT_EQ(moe_w4_kernel_for(MoeTile::kAuto, f, 16, 896, 8192), W4Kernel::kDecode8);
    EXPECT_EQ(moe_w4_kernel_for(MoeTile::kAuto, f, 1, 1, 7168), W4Kernel::kDecode8);  // a dense linear, T = 1
    EXPECT_EQ(moe_w4_kernel_for(MoeTile::kAuto, f, 8, 1, 33792), W4Kernel::kDecode);  // T = 8
    EXPECT_EQ(moe_w4_kernel_for(MoeTile::kAuto, f, 1, 1, 131072), W4Kernel::kM16);
    // The tall prefill class runs the warpgroup-MMA kernel.
    EXPECT_EQ(moe_w4_kernel_for(MoeTile::kAuto, f, 4096 * 16, 896, 3584), W4Kernel::kWgmma);
    EXPECT_EQ(moe_w4_kernel_for(MoeTile::kAuto, f, 2048 * 16, 896, 3584), W4Kernel::kM64);
    EXPECT_EQ(moe_w4_kernel_for(MoeTile::kM64, f, 16, 896, 3584), W4Kernel::kM64);
  }
}

// The decode kernels' split-K count (sm_90: 227 KB per block, 132 SMs).
TEST(MoeW4Repack, DecodeSplitsFollowKAndUnits) {
  for (W4Format f : kFormats) {
    SCOPED_TRACE(w4_format_name(f));
    // Whole K where it fits: the Kimi-K3 expert GEMMs at T = 1.
    EXPECT_EQ(moe_w4_decode_splits(f, 3584, 17 * 96, 132, W4Kernel::kDecode8), 1);
    EXPECT_EQ(moe_w4_decode_splits(f, 3072, 17 * 56, 132, W4Kernel::kDecode8), 1);
    EXPECT_EQ(moe_w4_decode_splits(f, 4608, 1000, 132, W4Kernel::kDecode3), 1);
    // One expert of N = 4096 (64 units) at T = 1: the fewest splits that fit K and give each SM at
    // most half a whole-K unit (K/64 = 112, 192, 528 chunks).
    EXPECT_EQ(moe_w4_decode_splits(f, 7168, 64, 132, W4Kernel::kDecode8), 2);
    EXPECT_EQ(moe_w4_decode_splits(f, 12288, 64, 132, W4Kernel::kDecode8), 4);
    EXPECT_EQ(moe_w4_decode_splits(f, 33792, 64, 132, W4Kernel::kDecode8), 8);
    EXPECT_EQ(moe_w4_decode_splits(f, 7168, 64, 132, W4Kernel::kDecode), 2);
    EXPECT_EQ(moe_w4_decode_splits(f, 12288, 64, 132, W4Kernel::kDecode), 4);
    EXPECT_EQ(moe_w4_decode_splits(f, 33792, 64, 132, W4Kernel::kDecode), 10);
    // K fits: whole K, however few the units.
    EXPECT_EQ(moe_w4_decode_splits(f, 2048, 64, 132, W4Kernel::kDecode8), 1);
    EXPECT_EQ(moe_w4_decode_splits(f, 256, 1, 132, W4Kernel::kDecode8), 1);
    // Many units (N = 163840) with K past shared memory: the fewest splits that fit.
    EXPECT_EQ(moe_w4_decode_splits(f, 7168, 2560, 132, W4Kernel::kDecode8), 2);
    // Few units (N = 512): up to 16 splits, never more than K/64.
    EXPECT_EQ(moe_w4_decode_splits(f, 7168, 8, 132, W4Kernel::kDecode8), 16);
    // No split fits: 0.
    EXPECT_EQ(moe_w4_decode_splits(f, 131072, 64, 132, W4Kernel::kDecode8), 0);
  }
  // Chunks per split: the last split shorter where they do not divide K/64.
  EXPECT_EQ(moe_w4_split_chunks(7168, 2), 56);
  EXPECT_EQ(moe_w4_split_chunks(1024, 3), 6);   // 6, 6, 4
  EXPECT_EQ(moe_w4_split_chunks(1024, 7), 3);   // 3, 3, 3, 3, 3, 1: six splits run
  EXPECT_EQ(moe_w4_split_chunks(1024, 1), 16);
  EXPECT_EQ(moe_w4_split_workspace_bytes(3, 16, 4096), size_t{3 * 16 * 4096 * 4});
}

// ---- grouped GEMM on the GPU ---------------------------------------------------------------------

enum class Routing {
  kDistinct,  // k distinct experts per token
  kRepeats,   // k picks with replacement: duplicates within a token
  kSubset,    // k distinct picks from a few experts: most experts get no rows
  kOne,       // every pick on one expert
  kCounts,    // top-1; the first E − 1 experts of a shuffled order get 16, 1, 15, 2, 14, … rows (every
              // count 1…16 once E ≥ 17), the last none; tokens in random order (T = counts_total(E))
};

int64_t count_for(int64_t j) { return j % 2 == 0 ? 16 - (j / 2) % 16 : 1 + (j / 2) % 16; }
int64_t counts_total(int64_t E) {
  int64_t t = 0;
  for (int64_t j = 0; j + 1 < E; ++j) t += count_for(j);
  return t;
}

std::vector<int32_t> make_ids(test::Rng& rng, int64_t T, int64_t k, int64_t E, Routing mode) {
  std::vector<int32_t> pool(static_cast<size_t>(E));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.gen());
  if (mode == Routing::kSubset) pool.resize(static_cast<size_t>(std::max<int64_t>(k, E / 8)));
  const int n = static_cast<int>(pool.size());
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  if (mode == Routing::kCounts) {
    ids.clear();
    for (int64_t j = 0; j + 1 < E; ++j) ids.insert(ids.end(), static_cast<size_t>(count_for(j)), pool[j]);
    std::shuffle(ids.begin(), ids.end(), rng.gen());
    return ids;
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      if (mode == Routing::kOne) {
        ids[t * k + j] = pool[0];
      } else if (mode == Routing::kRepeats) {
        ids[t * k + j] = pool[rng.uniform_int(0, n - 1)];
      } else {
        std::swap(pool[j], pool[rng.uniform_int(static_cast<int>(j), n - 1)]);
        ids[t * k + j] = pool[j];
      }
    }
  }
  return ids;
}

struct GemmCase {
  int64_t tokens, top_k, experts, n, k, parts;
  Routing routing;
};

class MoeW4GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(MoeW4GemmTest, MatchesFloat64OverExactDequant) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  GemmCase c = GetParam();
  if (c.routing == Routing::kCounts) c.tokens = counts_total(c.experts), c.top_k = 1;
  SCOPED_TRACE("T " + std::to_string(c.tokens) + " k " + std::to_string(c.top_k) + " E " + std::to_string(c.experts) +
               " N " + std::to_string(c.n) + " K " + std::to_string(c.k) + " parts " + std::to_string(c.parts) +
               ", seed " + std::to_string(rng.seed()));
  const int64_t T = c.tokens, k = c.top_k, E = c.experts, N = c.n, K = c.k, R = T * k;
  Arena& a = test::arena();
  const std::vector<int32_t> ids = make_ids(rng, T, k, E, c.routing);
  const DeviceTensor dids = a.alloc_tensor(DType::kI32, T, k, "ids");
  copy_bytes_to_device(dids.data, ids.data(), ids.size() * sizeof(int32_t));
  const MoeDispatch d = moe_dispatch_view(a.alloc(moe_dispatch_bytes(T, k, E), "dispatch"), T, k, E);
  moe_dispatch(dids, d, nullptr);
  const std::vector<int32_t> off = download_i32(DeviceTensor(d.expert_offsets, DType::kI32, 1, E + 1));
  const std::vector<int32_t> sorted = download_i32(DeviceTensor(d.sorted_token, DType::kI32, 1, R));
  const std::vector<float> x = test::round_bf16(rng.normal(static_cast<size_t>(T * K)));
  const DeviceTensor xs = a.alloc_tensor(DType::kBF16, R, K, "xs");
  moe_gather(upload_f32(a, x.data(), T, K, DType::kBF16, "x"), d, xs, nullptr);

  for (W4Format f : kFormats) {
    SCOPED_TRACE(w4_format_name(f));
    const Checkpoint ck = random_checkpoint(rng, f, E * N, K);
    const std::vector<float> w = dequant(f, ck, E * N, K);
    std::vector<float> out_scale = rng.uniform(static_cast<size_t>(E * c.parts), 0.25f, 2.0f);
    if (f == W4Format::kNvfp4) {
      for (float& s : out_scale) s *= 1.0f / 2688.0f;  // weight_scale_2 scale: amax / (6·448)
    }
    const MoeW4Bank bank = moe_w4_alloc(a, f, E, N, K, c.parts, "bank");
    moe_w4_upload_rows(bank, 0, ck.codes.data(), ck.scales.data(), E * N);
    moe_w4_upload_out_scale(bank, out_scale.data());

    const test::MoeReference ref = test::moe_reference(
        off, N, K, [&](int64_t r, int64_t i) { return static_cast<double>(x[static_cast<size_t>(sorted[r] * K + i)]); }, w,
        [&](int64_t e, int64_t n) { return static_cast<double>(out_scale[static_cast<size_t>(e * c.parts + n / (N / c.parts))]); });
    // Every kernel, and the tile classes' choice (MoeTile overload).
    for (W4Kernel kernel : {W4Kernel::kAuto, W4Kernel::kDecode, W4Kernel::kDecode3, W4Kernel::kDecode8, W4Kernel::kM16,
                            W4Kernel::kM64, W4Kernel::kWgmma}) {
      for (DType out : {DType::kBF16, DType::kF32}) {
        SCOPED_TRACE(std::string("kernel ") + w4_kernel_name(kernel) + ", out " + dtype_name(out));
        const DeviceTensor ys = a.alloc_tensor(out, R, N, "ys");
        poison(ys);
        moe_grouped_gemm_w4(xs, bank, d, ys, nullptr, kernel);
        const std::vector<float> got = download_f32(ys);
        test::expect_within_reference(got, ref, N, out, 2e-5);
        if (out == DType::kF32) {  // the routing weights in the epilogue
          const test::RowWeights rw = test::random_row_weights(rng, R);
          moe_grouped_gemm_w4(xs, bank, moe_weighted(d, rw.device), ys, nullptr, kernel);
          test::expect_row_weighted(download_f32(ys), got, rw, N);
        }
      }
    }
    for (MoeTile tile : {MoeTile::kAuto, MoeTile::kM16}) {
      SCOPED_TRACE(std::string("tile class ") + (tile == MoeTile::kAuto ? "auto" : "m16"));
      const DeviceTensor ys = a.alloc_tensor(DType::kBF16, R, N, "ys");
      poison(ys);
      moe_grouped_gemm_w4(xs, bank, d, ys, nullptr, tile);
      test::expect_within_reference(download_f32(ys), ref, N, DType::kBF16, 2e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeW4GemmTest,
    ::testing::Values(GemmCase{1, 8, 256, 256, 512, 1, Routing::kDistinct},      // decode: one row per expert
                      GemmCase{3, 8, 33, 128, 192, 1, Routing::kDistinct},       // odd E; K not a stage multiple
                      GemmCase{64, 16, 129, 192, 320, 1, Routing::kSubset},      // most experts empty
                      GemmCase{40, 6, 7, 256, 448, 2, Routing::kRepeats},        // duplicates; [gate | up] parts
                      GemmCase{200, 8, 17, 160, 256, 1, Routing::kDistinct},     // ~94 rows per expert; N % 128 != 0
                      GemmCase{300, 4, 5, 48, 128, 1, Routing::kOne},            // 1200 rows on one expert
                      GemmCase{2, 16, 64, 32, 3584, 2, Routing::kDistinct},      // K3 width
                      GemmCase{2, 8, 40, 80, 320, 1, Routing::kRepeats},         // N % 32 == 16 (half a decode unit)
                      GemmCase{0, 1, 18, 256, 512, 1, Routing::kCounts},         // rows per expert 1…16, one empty
                      GemmCase{0, 1, 4, 6144, 3584, 2, Routing::kCounts},        // K3 GEMM1 [w1|w3]: 16, 1, 15 rows, one empty
                      GemmCase{0, 1, 4, 3584, 3072, 1, Routing::kCounts}),       // K3 GEMM2: the same counts
    test::CaseIndexName());

// ---- split-K decode on the GPU ---------------------------------------------------------------------

// A bank with its exact dequantisation and per-part output scales.
struct TestBank {
  MoeW4Bank bank;
  std::vector<float> w, out_scale;
};
TestBank make_bank(test::Rng& rng, W4Format f, int64_t E, int64_t N, int64_t K, int64_t parts) {
  const Checkpoint ck = random_checkpoint(rng, f, E * N, K);
  TestBank b{moe_w4_alloc(test::arena(), f, E, N, K, parts, "bank"), dequant(f, ck, E * N, K),
             rng.uniform(static_cast<size_t>(E * parts), 0.25f, 2.0f)};
  if (f == W4Format::kNvfp4) {
    for (float& s : b.out_scale) s *= 1.0f / 2688.0f;
  }
  moe_w4_upload_rows(b.bank, 0, ck.codes.data(), ck.scales.data(), E * N);
  moe_w4_upload_out_scale(b.bank, b.out_scale.data());
  return b;
}

W4Workspace workspace(size_t bytes) {
  return {bytes > 0 ? static_cast<float*>(test::arena().alloc(bytes, "w4 workspace")) : nullptr, bytes};
}

// Dense linears as a bank of one expert (K past the whole-K decode kernels' shared memory): the
// automatic choice with the workspace moe_w4_workspace_bytes asks for splits K, and without one runs
// the tile kernel; both against float64, with and without row weights.
TEST(MoeW4SplitK, OneExpertMatchesFloat64) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Arena& a = test::arena();
  for (int64_t K : {7168, 12288}) {
    for (int64_t N : {4096, 1040, 32}) {
      for (W4Format f : kFormats) {
        SCOPED_TRACE(std::string(w4_format_name(f)) + " N " + std::to_string(N) + " K " + std::to_string(K));
        test::ArenaScope bank_scope;
        const TestBank b = make_bank(rng, f, 1, N, K, 1);
        for (int64_t T : {1, 3, 8, 16}) {
          SCOPED_TRACE("T " + std::to_string(T));
          test::ArenaScope step_scope;
          const MoeDispatch d = moe_dispatch_view(a.alloc(moe_dispatch_bytes(T, 1, 1), "dispatch"), T, 1, 1);
          moe_one_expert_dispatch(d, nullptr);
          const std::vector<float> x = test::round_bf16(rng.normal(static_cast<size_t>(T * K)));
          const DeviceTensor xs = upload_f32(a, x.data(), T, K, DType::kBF16, "xs");
          const test::MoeReference ref = test::moe_reference(
              {0, static_cast<int32_t>(T)}, N, K,
              [&](int64_t r, int64_t i) { return static_cast<double>(x[static_cast<size_t>(r * K + i)]); }, b.w,
              [&](int64_t, int64_t) { return static_cast<double>(b.out_scale[0]); });
          const size_t bytes = moe_w4_workspace_bytes(b.bank, d);
          EXPECT_GT(bytes, 0u);  // K fits no whole-K decode kernel: split
          const W4Workspace ws = workspace(bytes);
          for (DType out : {DType::kBF16, DType::kF32}) {
            SCOPED_TRACE(std::string("out ") + dtype_name(out));
            const DeviceTensor ys = a.alloc_tensor(out, T, N, "ys");
            poison(ys);
            moe_grouped_gemm_w4(xs, b.bank, d, ys, nullptr, ws);
            const std::vector<float> got = download_f32(ys);
            test::expect_within_reference(got, ref, N, out, 2e-5);
            poison(ys);
            moe_grouped_gemm_w4(xs, b.bank, d, ys, nullptr);  // no workspace: whole K (the tile kernel)
            test::expect_within_reference(download_f32(ys), ref, N, out, 2e-5);
            if (out == DType::kF32) {  // the row weights, applied after the splits' sum
              const test::RowWeights rw = test::random_row_weights(rng, T);
              poison(ys);
              moe_grouped_gemm_w4(xs, b.bank, moe_weighted(d, rw.device), ys, nullptr, ws);
              test::expect_row_weighted(download_f32(ys), got, rw, N);
            }
          }
        }
      }
    }
  }
}

// Forced split counts at a small K (16 chunks): 3 splits of 6, 6, 4 chunks; 7 asked, 6 of 3 chunks
// run (the last of one chunk, where seven of the eight K slices have none); 16 of one chunk — against
// the same decode kernel over whole K and against float64, over a routing with empty experts and
// skipped picks (rows no expert covers, which both leave alone), f32 and bf16, with row weights.
TEST(MoeW4SplitK, ForcedSplitsMatchWholeK) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Arena& a = test::arena();
  const int64_t T = 6, k = 4, E = 16, N = 224, K = 1024, R = T * k;  // N % 64 = 32: half a decode unit
  std::vector<int32_t> ids = make_ids(rng, T, k, E, Routing::kSubset);
  ids[1] = ids[9] = -1;
  const DeviceTensor dids = a.alloc_tensor(DType::kI32, T, k, "ids");
  copy_bytes_to_device(dids.data, ids.data(), ids.size() * sizeof(int32_t));
  const MoeDispatch d = moe_dispatch_view(a.alloc(moe_dispatch_bytes(T, k, E), "dispatch"), T, k, E);
  moe_dispatch(dids, d, nullptr);
  const std::vector<int32_t> off = download_i32(DeviceTensor(d.expert_offsets, DType::kI32, 1, E + 1));
  const std::vector<int32_t> sorted = download_i32(DeviceTensor(d.sorted_token, DType::kI32, 1, R));
  ASSERT_EQ(off.back(), R - 2);
  const std::vector<float> x = test::round_bf16(rng.normal(static_cast<size_t>(T * K)));
  const DeviceTensor xs = a.alloc_tensor(DType::kBF16, R, K, "xs");
  moe_gather(upload_f32(a, x.data(), T, K, DType::kBF16, "x"), d, xs, nullptr);
  const size_t covered = static_cast<size_t>(off.back() * N);
  const test::RowWeights rw = test::random_row_weights(rng, R);
  for (W4Format f : kFormats) {
    SCOPED_TRACE(w4_format_name(f));
    const TestBank b = make_bank(rng, f, E, N, K, 2);
    const test::MoeReference ref = test::moe_reference(
        off, N, K, [&](int64_t r, int64_t i) { return static_cast<double>(x[static_cast<size_t>(sorted[r] * K + i)]); },
        b.w, [&](int64_t e, int64_t n) {
          return static_cast<double>(b.out_scale[static_cast<size_t>(e * 2 + n / (N / 2))]);
        });
    for (W4Kernel kernel : {W4Kernel::kDecode, W4Kernel::kDecode3, W4Kernel::kDecode8}) {
      for (int splits : {3, 7, 16}) {
        const W4Workspace ws = workspace(moe_w4_split_workspace_bytes(splits, R, N));
        for (DType out : {DType::kBF16, DType::kF32}) {
          for (bool weighted : {false, true}) {
            SCOPED_TRACE(std::string("kernel ") + w4_kernel_name(kernel) + ", splits " + std::to_string(splits) +
                         ", out " + dtype_name(out) + (weighted ? ", row weights" : ""));
            const MoeDispatch dw = weighted ? moe_weighted(d, rw.device) : d;
            const DeviceTensor ys = a.alloc_tensor(out, R, N, "ys");
            poison(ys);
            moe_grouped_gemm_w4(xs, b.bank, dw, ys, nullptr, kernel, W4Workspace{}, 1);
            const std::vector<float> whole = download_f32(ys);
            poison(ys);
            moe_grouped_gemm_w4(xs, b.bank, dw, ys, nullptr, kernel, ws, splits);
            const std::vector<float> split = download_f32(ys);
            for (size_t i = covered; i < split.size(); ++i) {
              ASSERT_TRUE(std::isnan(split[i])) << "uncovered element " << i;
            }
            if (!weighted) {
              const std::vector<float> head(split.begin(), split.begin() + static_cast<std::ptrdiff_t>(covered));
              test::expect_within_reference(head, ref, N, out, 2e-5);
            }
            // Against whole K: fp32 summation order only (bf16: the final rounding may differ by a step).
            const double rel_out = out == DType::kBF16 ? 1.0 / 128 : 0.0;
            int64_t bad = 0;
            for (size_t i = 0; i < covered; ++i) {
              const double wgt = weighted ? rw.host[i / static_cast<size_t>(N)] : 1.0;
              const double tol = rel_out * std::fabs(whole[i]) + 2e-5 * wgt * ref.abs_sum[i] + 1e-30;
              if (!(std::fabs(split[i] - whole[i]) <= tol) && ++bad <= 5) {
                ADD_FAILURE() << "row " << i / N << " col " << i % N << ": " << split[i] << " split vs " << whole[i];
              }
            }
            EXPECT_EQ(bad, 0);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace k3::cuda
