// ModelSlim W4A8 expert GEMM (quant/formats/modelslim/cuda/moe_w4a8.h) on fresh random inputs (the seed is printed;
// K3_TEST_SEED replays one). Weights come from the CPU quantiser make-tiny writes checkpoints with
// (quant/formats/modelslim quantize_w4a8: bf16-stored scales, per channel or per group, new packed or old
// layout); activations follow the CPU's int8 contract (cpu prepare_int8, Int8PerToken).
//
// Without a GPU (these run in CI too):
//  - the repack: every s8 operand the kernel forms from the repacked words (moe_w4a8_layout.h) is 16 ×
//    the checkpoint's code, and every bank scale is the CPU int8 kernel's fp32 product scale·second;
//  - the kernel's arithmetic emulated on the host from the repacked bytes (int32 group sums of 16·q·c,
//    one fma per group, 1/16, the row scale) against the float64 reference and the CPU engine's own
//    W4A8 kernel, within the bound below;
//  - what the repack rejects, and the kernel choice.
// On the GPU (passed on the H200, 2026-11-29): the quantisation kernel equals prepare_int8 bit for bit (codes
// and scales, ties and all-zero rows included); every GEMM kernel (kM16 decode class, kM64 / kM128
// prefill class, kAuto; bf16 and f32 out) on sorted rows of a real moe_dispatch against the float64
// reference Σ_k value(c_k)·w_k over the exact dequantisation (dequant_w4a8) times out_scale, partial
// last stages of the code ring included.
//
// Tolerance: the integer products and their int32 group sums are exact, so only fp32 rounding remains:
// one rounding of scale·second (vs the reference's (q·scale)·second: two per weight), one per group
// fma, the row scale and out_scale, and the reference's own float activation values c·s — at most
// (groups + 8)·2^-24·S with S = |out_scale|·Σ_k |value_k·w_k|; bf16 output adds 2^-8·|ref|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "quant/formats/modelslim/cpu/modelslim_matrix.h"
#include "backend/cpu/kernels/weight_matrix.h"
#include "backend/cuda/moe/moe.h"
#include "quant/formats/modelslim/cuda/moe_w4a8.h"
#include "quant/formats/modelslim/cuda/moe_w4a8_tuning.h"
#include "quant/formats/modelslim/cuda/moe_w4a8_layout.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"
#include "moe_test_util.h"
#include "quant/formats/modelslim/modelslim.h"

namespace k3::cuda {
namespace {

// One N×K matrix as make-tiny writes it: normal weights with a few outlier columns and one all-zero
// row (scale 1 by the producer rule), quantised with bf16-stored scales.
W4A8Weights random_matrix(test::Rng& rng, int64_t n, int64_t k, int64_t group_size, bool packed) {
  std::vector<float> w = rng.normal(static_cast<size_t>(n * k), 0.05f);
  for (int i = 0; i < 4; ++i) w[static_cast<size_t>(rng.uniform_int(0, static_cast<int>(n * k) - 1))] *= 40.0f;
  std::fill_n(w.begin() + rng.uniform_int(0, static_cast<int>(n) - 1) * k, k, 0.0f);
  return quantize_w4a8(w.data(), n, k, group_size, packed, true);
}

std::vector<int8_t> codes_of(const W4A8Weights& q, bool packed, int64_t n, int64_t k) {
  if (!packed) return q.weight;
  std::vector<int8_t> c(static_cast<size_t>(n * k));
  unpack_int4_along_n(q.weight.data(), n, k, c.data());
  return c;
}

std::vector<float> dequant(const W4A8Weights& q, bool packed, int64_t group_size, int64_t n, int64_t k) {
  std::vector<float> w(static_cast<size_t>(n * k));
  dequant_w4a8(q.weight.data(), packed, q.scale.data(), q.scale_second.data(), group_size, n, k, w.data(), Where{});
  return w;
}

uint32_t word_at(const std::vector<uint8_t>& codes, size_t offset) {
  uint32_t w = 0;
  for (int b = 0; b < 4; ++b) w |= static_cast<uint32_t>(codes[offset + b]) << (8 * b);
  return w;
}

int8_t byte_of(uint32_t reg, int b) { return static_cast<int8_t>(static_cast<uint8_t>(reg >> (8 * b))); }

struct Layouts {
  int64_t group_size;
  bool packed;
};
constexpr Layouts kLayouts[] = {{0, true}, {64, true}, {256, true}, {0, false}, {128, false}};

// ---- repack and emulated kernel arithmetic (no GPU) --------------------------------------------------

TEST(MoeW4A8Repack, OperandsAreSixteenTimesTheCodesAndScalesTheCpuProducts) {
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t n = 48, k = 512;
  for (const Layouts& l : kLayouts) {
    SCOPED_TRACE("group_size " + std::to_string(l.group_size) + (l.packed ? " packed" : " old layout"));
    const W4A8Weights q = random_matrix(rng, n, k, l.group_size, l.packed);
    const std::vector<int8_t> codes = codes_of(q, l.packed, n, k);
    const int64_t group = l.group_size > 0 ? l.group_size : k, groups = k / group, chunks = k / w4a8::kChunk;
    std::vector<uint8_t> bank(static_cast<size_t>(n * k / 2), 0xAA);
    std::vector<float> scales(static_cast<size_t>(n * groups), -1.0f);
    moe_w4a8_repack(q.weight.data(), l.packed, q.scale.data(), q.scale_second.data(), l.group_size, n, k, bank.data(),
                    scales.data());
    int64_t bad = 0;
    for (int64_t grp = 0; grp < n / w4a8::kRowGroup; ++grp) {
      for (int64_t c = 0; c < chunks; ++c) {
        for (int lane = 0; lane < 32; ++lane) {
          for (int w = 0; w < 4; ++w) {
            const uint32_t word = word_at(bank, static_cast<size_t>((grp * chunks + c) * w4a8::kChunkCodeBytes + lane * 16 + w * 4));
            for (int high = 0; high < 2; ++high) {
              const uint32_t reg = high ? w4a8::operand_high(word) : w4a8::operand_low(word);
              for (int b = 0; b < 4; ++b) {
                const int64_t row = grp * w4a8::kRowGroup + w4a8::fragment_row(lane, high);
                const int64_t col = c * w4a8::kChunk + w4a8::fragment_col(lane, w, b);
                const int want = 16 * codes[static_cast<size_t>(row * k + col)];
                if (byte_of(reg, b) != want && ++bad <= 5) {
                  ADD_FAILURE() << "row " << row << " col " << col << ": operand " << int{byte_of(reg, b)} << " vs " << want;
                }
              }
            }
          }
        }
      }
      for (int64_t j = 0; j < groups; ++j) {
        for (int r = 0; r < w4a8::kRowGroup; ++r) {
          const int64_t row = grp * w4a8::kRowGroup + r;
          const float want = l.group_size > 0 ? q.scale[row] * q.scale_second[row * groups + j] : q.scale[row];
          const float got = scales[static_cast<size_t>((grp * groups + j) * w4a8::kRowGroup + w4a8::scale_slot(r))];
          if (std::memcmp(&got, &want, sizeof got) != 0 && ++bad <= 5) {
            ADD_FAILURE() << "row " << row << " group " << j << ": scale " << got << " vs " << want;
          }
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// Row n of token t as the kernel computes it, from the repacked bank bytes.
float emulate_kernel(const std::vector<uint8_t>& bank, const std::vector<float>& scales, int64_t k, int64_t group,
                     int64_t n, const int8_t* c, float s_t) {
  const int64_t grp = n / w4a8::kRowGroup, r = n % w4a8::kRowGroup, chunks = k / w4a8::kChunk, groups = k / group;
  const int high = r >= 8 ? 1 : 0;
  float acc = 0.0f;
  int32_t sum = 0;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    for (int t = 0; t < 4; ++t) {
      const int lane = 4 * static_cast<int>(r % 8) + t;
      for (int w = 0; w < 4; ++w) {
        const uint32_t word = word_at(bank, static_cast<size_t>((grp * chunks + ch) * w4a8::kChunkCodeBytes + lane * 16 + w * 4));
        const uint32_t reg = high ? w4a8::operand_high(word) : w4a8::operand_low(word);
        for (int b = 0; b < 4; ++b) sum += byte_of(reg, b) * c[ch * w4a8::kChunk + w4a8::fragment_col(lane, w, b)];
      }
    }
    if ((ch + 1) % (group / w4a8::kChunk) == 0) {
      const float s = scales[static_cast<size_t>((grp * groups + (ch * w4a8::kChunk) / group) * w4a8::kRowGroup + w4a8::scale_slot(static_cast<int>(r)))];
      acc = std::fma(static_cast<float>(sum), s, acc);
      sum = 0;
    }
  }
  return acc / 16.0f * s_t;
}

TEST(MoeW4A8Repack, EmulatedKernelArithmeticWithinBoundOfFloat64AndCpuKernel) {
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const int64_t n = 32, k = 1024, m = 5;
  for (const Layouts& l : kLayouts) {
    SCOPED_TRACE("group_size " + std::to_string(l.group_size) + (l.packed ? " packed" : " old layout"));
    const W4A8Weights q = random_matrix(rng, n, k, l.group_size, l.packed);
    const std::vector<float> w = dequant(q, l.packed, l.group_size, n, k);
    const int64_t group = l.group_size > 0 ? l.group_size : k;
    std::vector<uint8_t> bank(static_cast<size_t>(n * k / 2));
    std::vector<float> scales(static_cast<size_t>(n * (k / group)));
    moe_w4a8_repack(q.weight.data(), l.packed, q.scale.data(), q.scale_second.data(), l.group_size, n, k, bank.data(),
                    scales.data());
    std::vector<float> x = test::round_bf16(rng.normal(static_cast<size_t>(m * k)));
    std::fill_n(x.begin() + k, k, 0.0f);  // token 1: all zero (scale 0)
    cpu::PreparedActivations a;
    cpu::prepare_int8(x.data(), m, k, k, cpu::ActivationForm::Int8PerToken, a);
    const auto cpu = cpu::make_w4a8_matrix(q.weight, l.packed, q.scale, q.scale_second, l.group_size, n, k,
                                           cpu::selected_isa());
    std::vector<float> y_cpu(static_cast<size_t>(m * n));
    cpu->dot_rows(a, 0, n, y_cpu.data(), n);
    std::vector<float> values(static_cast<size_t>(k));
    int64_t bad = 0;
    for (int64_t t = 0; t < m; ++t) {
      a.values(t, values.data());
      for (int64_t r = 0; r < n; ++r) {
        double ref = 0, abs = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double p = static_cast<double>(values[i]) * w[static_cast<size_t>(r * k + i)];
          ref += p;
          abs += std::fabs(p);
        }
        const float got = emulate_kernel(bank, scales, k, group, r, &a.q[static_cast<size_t>(t * k)], a.scale[t]);
        const double tol = static_cast<double>(k / group + 8) * 0x1p-24 * abs + 1e-30;
        const float cpu_y = y_cpu[static_cast<size_t>(t * n + r)];
        if ((!(std::fabs(got - ref) <= tol) || !(std::fabs(cpu_y - ref) <= tol)) && ++bad <= 5) {
          ADD_FAILURE() << "token " << t << " row " << r << ": emulated " << got << ", cpu " << cpu_y << " vs " << ref
                        << " (tolerance " << tol << ")";
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(MoeW4A8Repack, RejectsWhatTheKernelsCannotRepresent) {
  std::vector<int8_t> w(32 * 128, 3);
  std::vector<float> s(32, 0.5f), s2(32 * 4, 2.0f), dst_s(32 * 4);
  std::vector<uint8_t> dst(32 * 128 / 2);
  moe_w4a8_repack(w.data(), false, s.data(), s2.data(), 64, 32, 128, dst.data(), dst_s.data());
  moe_w4a8_repack(w.data(), true, s.data(), s2.data(), 0, 32, 128, dst.data(), dst_s.data());
  EXPECT_THROW(moe_w4a8_repack(w.data(), false, s.data(), s2.data(), 0, 8, 128, dst.data(), dst_s.data()), Error);
  EXPECT_THROW(moe_w4a8_repack(w.data(), false, s.data(), s2.data(), 0, 32, 96, dst.data(), dst_s.data()), Error);
  EXPECT_THROW(moe_w4a8_repack(w.data(), false, s.data(), s2.data(), 32, 32, 128, dst.data(), dst_s.data()), Error);
  EXPECT_THROW(moe_w4a8_repack(w.data(), false, s.data(), s2.data(), 192, 32, 256, dst.data(), dst_s.data()), Error);
  w[77] = 8;  // old layout: outside [-8, 7]
  EXPECT_THROW(moe_w4a8_repack(w.data(), false, s.data(), s2.data(), 0, 32, 128, dst.data(), dst_s.data()), Error);
}

TEST(MoeW4A8Repack, KernelChoiceFollowsRowsPerExpert) {
  EXPECT_EQ(moe_w4a8_tile_for(16, 896), MoeTile::kM16);         // decode (one token)
  EXPECT_EQ(moe_w4a8_tile_for(512 * 16, 896), MoeTile::kM16);   // 9 rows per expert
  EXPECT_EQ(moe_w4a8_tile_for(4096 * 16, 896), MoeTile::kM64);  // prefill, 73 rows per expert
  EXPECT_EQ(moe_w4a8_tile_for(0, 8), MoeTile::kM16);
  EXPECT_EQ(moe_w4a8_tile_for(1, 1), MoeTile::kM16);            // a dense linear's one token
}

// ---- on the GPU ------------------------------------------------------------------------------------

TEST(MoeW4A8Quantize, MatchesCpuContractBitForBit) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Arena& ar = test::arena();
  for (const int64_t K : {512, 3584, 10000}) {  // 10000: past the values a thread keeps in registers
    const int64_t R = 37;
    std::vector<float> x = test::round_bf16(rng.normal(static_cast<size_t>(R * K), 3.0f));
    std::fill_n(x.begin(), K, 0.0f);  // row 0: all zero
    for (int64_t i = 0; i < K; ++i) {  // row 1: amax 127 → s = 1, values j + 0.5 tie
      x[static_cast<size_t>(K + i)] = static_cast<float>(i % 200 - 100) + 0.5f;
    }
    x[static_cast<size_t>(K)] = 127.0f;
    for (int64_t i = 0; i < K; ++i) {  // row 2: amax 63.5 → s = 0.5, odd quarters tie
      x[static_cast<size_t>(2 * K + i)] = 0.25f * static_cast<float>(2 * (i % 100) - 99);
    }
    x[static_cast<size_t>(2 * K + 5)] = -63.5f;
    x[static_cast<size_t>(3 * K + 7)] = test::round_bf16(1e-30f);  // row 3: a tiny value among normals
    for (const DType dt : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(std::string("K ") + std::to_string(K) + ", x " + dtype_name(dt));
      const DeviceTensor dx = upload_f32(ar, x.data(), R, K, dt, "x");
      const Int8Rows q{ar.alloc_tensor(DType::kU8, R, K, "codes"), ar.alloc_n<float>(static_cast<size_t>(R), "scale")};
      moe_quantize_int8_rows(dx, q, nullptr);
      const std::vector<uint8_t> codes = download_bytes(q.codes);
      const std::vector<float> scale = download_f32(DeviceTensor(q.scale, DType::kF32, 1, R));
      cpu::PreparedActivations a;
      cpu::prepare_int8(x.data(), R, K, K, cpu::ActivationForm::Int8PerToken, a);
      int64_t bad = 0;
      for (int64_t r = 0; r < R; ++r) {
        if (std::memcmp(&scale[r], &a.scale[r], sizeof(float)) != 0 && ++bad <= 5) {
          ADD_FAILURE() << "row " << r << ": scale " << scale[r] << " vs " << a.scale[r];
        }
        for (int64_t i = 0; i < K; ++i) {
          const auto got = static_cast<int8_t>(codes[static_cast<size_t>(r * K + i)]);
          if (got != a.q[static_cast<size_t>(r * K + i)] && ++bad <= 5) {
            ADD_FAILURE() << "row " << r << " col " << i << ": code " << int{got} << " vs "
                          << int{a.q[static_cast<size_t>(r * K + i)]} << " (x " << x[static_cast<size_t>(r * K + i)] << ")";
          }
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

enum class Routing { kDistinct, kRepeats, kOne };

std::vector<int32_t> make_ids(test::Rng& rng, int64_t T, int64_t k, int64_t E, Routing mode) {
  std::vector<int32_t> pool(static_cast<size_t>(E));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.gen());
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      if (mode == Routing::kOne) {
        ids[t * k + j] = pool[0];
      } else if (mode == Routing::kRepeats) {
        ids[t * k + j] = pool[rng.uniform_int(0, static_cast<int>(E) - 1)];
      } else {
        std::swap(pool[j], pool[rng.uniform_int(static_cast<int>(j), static_cast<int>(E) - 1)]);
        ids[t * k + j] = pool[j];
      }
    }
  }
  return ids;
}

struct GemmCase {
  int64_t tokens, top_k, experts, n, k, parts, group_size;
  bool packed;
  Routing routing;
};

std::string describe(const GemmCase& c) {
  return "T " + std::to_string(c.tokens) + " k " + std::to_string(c.top_k) + " E " + std::to_string(c.experts) + " N " +
         std::to_string(c.n) + " K " + std::to_string(c.k) + " parts " + std::to_string(c.parts) + " group_size " +
         std::to_string(c.group_size) + (c.packed ? " packed" : " old layout");
}

// A case's GEMM inputs: a random routing dispatched on the GPU, the tokens' rows gathered into the
// sorted order and quantised to int8, and a random bank (every expert's parts quantised on their own,
// as gate and up of [w1 | w3] are separate checkpoint tensors) with random out_scale; besides, on the
// host, what the float64 reference needs.
struct GemmInputs {
  MoeDispatch d;
  std::vector<int32_t> offsets, sorted;  // the dispatch's expert offsets and sorted tokens
  Int8Rows xq;                           // the sorted rows, int8
  std::vector<float> values;             // the CPU's int8 values of the tokens, [T, K]
  MoeW4A8Bank bank;
  std::vector<float> w, out_scale;       // the bank's exact dequantisation [E·N, K]; out_scale [E·parts]
};

GemmInputs make_gemm_inputs(test::Rng& rng, Arena& a, const GemmCase& c) {
  const int64_t T = c.tokens, k = c.top_k, E = c.experts, N = c.n, K = c.k, R = T * k, NP = N / c.parts;
  GemmInputs in;
  const std::vector<int32_t> ids = make_ids(rng, T, k, E, c.routing);
  const DeviceTensor dids = a.alloc_tensor(DType::kI32, T, k, "ids");
  copy_bytes_to_device(dids.data, ids.data(), ids.size() * sizeof(int32_t));
  in.d = moe_dispatch_view(a.alloc(moe_dispatch_bytes(T, k, E), "dispatch"), T, k, E);
  moe_dispatch(dids, in.d, nullptr);
  in.offsets = download_i32(DeviceTensor(in.d.expert_offsets, DType::kI32, 1, E + 1));
  in.sorted = download_i32(DeviceTensor(in.d.sorted_token, DType::kI32, 1, R));

  const std::vector<float> x = test::round_bf16(rng.normal(static_cast<size_t>(T * K)));
  const DeviceTensor xs = a.alloc_tensor(DType::kBF16, R, K, "xs");
  moe_gather(upload_f32(a, x.data(), T, K, DType::kBF16, "x"), in.d, xs, nullptr);
  in.xq = {a.alloc_tensor(DType::kU8, R, K, "xq"), a.alloc_n<float>(static_cast<size_t>(R), "xq scale")};
  moe_quantize_int8_rows(xs, in.xq, nullptr);
  cpu::PreparedActivations act;
  cpu::prepare_int8(x.data(), T, K, K, cpu::ActivationForm::Int8PerToken, act);
  in.values.resize(static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t) act.values(t, &in.values[static_cast<size_t>(t * K)]);

  in.bank = moe_w4a8_alloc(a, E, N, K, c.group_size, c.parts, "bank");
  in.w.resize(static_cast<size_t>(E * N * K));
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t p = 0; p < c.parts; ++p) {
      const W4A8Weights q = random_matrix(rng, NP, K, c.group_size, c.packed);
      moe_w4a8_upload_rows(in.bank, e * N + p * NP, q.weight.data(), c.packed, q.scale.data(), q.scale_second.data(), NP);
      const std::vector<float> wp = dequant(q, c.packed, c.group_size, NP, K);
      std::copy(wp.begin(), wp.end(), in.w.begin() + (e * N + p * NP) * K);
    }
  }
  in.out_scale = rng.uniform(static_cast<size_t>(E * c.parts), 0.25f, 2.0f);
  moe_w4a8_upload_out_scale(in.bank, in.out_scale.data());
  return in;
}

class MoeW4A8GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(MoeW4A8GemmTest, MatchesFloat64OverExactDequant) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  const GemmCase c = GetParam();
  SCOPED_TRACE(describe(c) + ", seed " + std::to_string(rng.seed()));
  const int64_t N = c.n, K = c.k, R = c.tokens * c.top_k, NP = N / c.parts;
  Arena& a = test::arena();
  const GemmInputs in = make_gemm_inputs(rng, a, c);
  const test::MoeReference ref = test::moe_reference(
      in.offsets, N, K,
      [&](int64_t r, int64_t i) { return static_cast<double>(in.values[static_cast<size_t>(in.sorted[r] * K + i)]); },
      in.w, [&](int64_t e, int64_t n) { return static_cast<double>(in.out_scale[static_cast<size_t>(e * c.parts + n / NP)]); });
  const double groups = static_cast<double>(in.bank.groups());
  for (MoeTile tile : {MoeTile::kAuto, MoeTile::kM16, MoeTile::kM64}) {
    for (DType out : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(std::string("tile ") +
                   (tile == MoeTile::kAuto ? std::string("auto") : std::to_string(moe_tile_rows(tile))) + ", out " +
                   dtype_name(out));
      const DeviceTensor ys = a.alloc_tensor(out, R, N, "ys");
      poison(ys);
      moe_grouped_gemm_w4a8(in.xq, in.bank, in.d, ys, nullptr, tile);
      const std::vector<float> got = download_f32(ys);
      test::expect_within_reference(got, ref, N, out, (groups + 8) * 0x1p-24);
      if (out == DType::kF32) {  // the routing weights in the epilogue
        const test::RowWeights rw = test::random_row_weights(rng, R);
        moe_grouped_gemm_w4a8(in.xq, in.bank, moe_weighted(in.d, rw.device), ys, nullptr, tile);
        test::expect_row_weighted(download_f32(ys), got, rw, N);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeW4A8GemmTest,
    ::testing::Values(GemmCase{1, 8, 256, 256, 512, 1, 0, true, Routing::kDistinct},      // decode: one row per expert
                      GemmCase{3, 8, 33, 128, 192, 1, 64, true, Routing::kDistinct},      // odd E; 3 groups; K not a stage multiple
                      GemmCase{64, 16, 129, 192, 320, 1, 64, true, Routing::kRepeats},    // duplicates; 5 groups
                      GemmCase{40, 6, 7, 256, 512, 2, 256, false, Routing::kRepeats},     // old layout; [gate | up] parts
                      GemmCase{200, 8, 17, 160, 256, 1, 128, true, Routing::kDistinct},   // ~94 rows per expert; N % 128 != 0
                      GemmCase{300, 4, 5, 48, 128, 1, 0, true, Routing::kOne},            // 1200 rows on one expert
                      GemmCase{2, 16, 64, 32, 3584, 2, 256, true, Routing::kDistinct},    // K3 GEMM1 width, 14 groups
                      GemmCase{2, 16, 64, 48, 3072, 1, 0, true, Routing::kDistinct},      // K3 GEMM2 width, per channel
                      // The code ring's partial last stages: K 1600 (25 chunks) and 192 (3) of both tiles (6 and
                      // 2 chunks per stage), K 1280 (20, groups of 256) of kM16; N 48 leaves warps with fewer
                      // 16-row groups than their share or none, N 336 a partial last column tile.
                      GemmCase{40, 6, 7, 48, 1600, 1, 0, true, Routing::kRepeats},
                      GemmCase{40, 6, 7, 336, 1600, 1, 64, true, Routing::kRepeats},
                      GemmCase{3, 8, 17, 48, 1280, 1, 256, true, Routing::kDistinct},
                      GemmCase{40, 6, 7, 336, 1280, 1, 256, false, Routing::kRepeats},
                      GemmCase{200, 4, 5, 48, 192, 1, 64, true, Routing::kRepeats}),
    test::CaseIndexName());

}  // namespace
}  // namespace k3::cuda
