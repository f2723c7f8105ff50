// AVX-512 (F/BW/VL + VNNI) GGML dot kernels. Weights are unpacked in registers to unsigned codes
// in natural element order, 64 per zmm, and multiplied with the int8 activations by VNNI:
//   32-element formats: vpdpbusd per pair of blocks → int32 lanes, 8 per block; the block scales
//     d_w·d_x (staged 16 blocks at a time: one vpermw per 4 blocks of ≤ 20 bytes, else a gather)
//     are applied in float per lane, the zero-point / min term Σ_b (m_b − z·d_w,b)·d_x,b·Σx_b
//     once per row from those same scales.
//   K-quants: vpmaddubsw (u8·s8 pairs → int16) then vpdpwssd with the sub-block scales as int16
//     lanes → one int32 accumulator per super-block; d·d_x and dmin·d_x applied in float once per
//     super-block (groups of 4 super-blocks share the scale unpacking, see below).
// GEMV speed is bound by DRAM on the formats of ≥ 4 bits; Q2_K/Q3_K decode costs ~30 vector uops
// per super-block, about as fast as one core streams its bytes (bench/bench_cpu_gemv.cpp).
#include <immintrin.h>

#include <algorithm>

#include "quant/formats/ggml/cpu/ggml_dot_impl.h"

namespace k3::cpu::ggml {
namespace {

inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// 32 bytes at p in both 256-bit halves.
inline __m512i bcast256(const uint8_t* p) { return _mm512_broadcast_i64x4(load256(p)); }
// [a, a, b, b] in 128-bit lanes: two 16-byte nibble fields, each ready to split into lo | hi.
inline __m512i bcast2x128(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_broadcastsi128_si256(load128(a))),
                            _mm256_broadcastsi128_si256(load128(b)), 1);
}
// Per 64-bit lane right shifts, four lanes (one 256-bit half) at a time.
inline __m512i shifts_by_half(int lo, int hi) { return _mm512_setr_epi64(lo, lo, lo, lo, hi, hi, hi, hi); }
// Low nibbles of each 16-byte field in its first 128-bit lane, high nibbles in the second:
// [a, a, b, b] → [a & 15, a >> 4, b & 15, b >> 4].
inline __m512i split_nibbles_2x128(__m512i v) {
  return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0F));
}
// pshufb indices that fill every int16 of 128-bit lane L with byte bL of the (lane-broadcast)
// source, zero-extended.
inline __m512i lane_words(int b0, int b1, int b2, int b3) {
  const auto w = [](int b) { return static_cast<int>(0x80008000u | static_cast<uint32_t>(b) << 16 | static_cast<uint32_t>(b)); };
  return _mm512_setr_epi32(w(b0), w(b0), w(b0), w(b0), w(b1), w(b1), w(b1), w(b1), w(b2), w(b2), w(b2), w(b2), w(b3),
                           w(b3), w(b3), w(b3));
}
// vpermw indices that fill every int16 of 128-bit lane L with word iL of the source.
inline __m512i lane_word_index(int i0, int i1, int i2, int i3) {
  const auto w = [](int i) { return i | i << 16; };
  return _mm512_setr_epi32(w(i0), w(i0), w(i0), w(i0), w(i1), w(i1), w(i1), w(i1), w(i2), w(i2), w(i2), w(i2), w(i3),
                           w(i3), w(i3), w(i3));
}

inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }
inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// 16 f16 values at base + idx[i] (masked lanes: 0), as floats.
inline __m512 gather_f16(const uint8_t* base, __m512i idx, __mmask16 k) {
  const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, base, 1);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

// ---- 32-element blocks -------------------------------------------------------------------

// Per format: block bytes, zero point z of the unsigned codes, where the scales live, and the
// unsigned codes of two consecutive blocks as one zmm (block b in bytes 0..31, b+1 in 32..63).
enum class ScaleKind { F16, E8M0 };

// Four consecutive blocks' 16 nibble bytes (at byte kQs of each) in the 128-bit lanes of a zmm,
// split into low nibbles (elements 0..15 of each block) and high nibbles (16..31): the weights
// of CodeOrder::NibbleQuads activations, with one AND (and a shift) per 4 blocks.
template <size_t kBytes, int kQs>
inline void quad_nibbles(const uint8_t* b, __m512i& lo, __m512i& hi) {
  __m512i v = _mm512_zextsi128_si512(load128(b + kQs));
  v = _mm512_inserti32x4(v, load128(b + kBytes + kQs), 1);
  v = _mm512_inserti32x4(v, load128(b + 2 * kBytes + kQs), 2);
  v = _mm512_inserti32x4(v, load128(b + 3 * kBytes + kQs), 3);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  lo = _mm512_and_si512(v, low4);
  hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
}
struct Q4_0Fmt {
  static constexpr size_t kBytes = kQ4_0Bytes;
  static constexpr int kZero = 8;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static constexpr int kMinOffset = -1;  // no min
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return split_nibbles_2x128(bcast2x128(b0 + 2, b1 + 2)); }
  static void quad(const uint8_t* b, __m512i& lo, __m512i& hi) { quad_nibbles<kBytes, 2>(b, lo, hi); }
};
struct Q4_1Fmt {
  static constexpr size_t kBytes = kQ4_1Bytes;
  static constexpr int kZero = 0;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static constexpr int kMinOffset = 2;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return split_nibbles_2x128(bcast2x128(b0 + 4, b1 + 4)); }
  static void quad(const uint8_t* b, __m512i& lo, __m512i& hi) { quad_nibbles<kBytes, 4>(b, lo, hi); }
};
// Q5: the nibbles plus 16 where bit j of the block's 32-bit qh is set (byte j = element j).
template <int kQh, int kQs>
inline __m512i q5_codes(const uint8_t* b0, const uint8_t* b1) {
  const __m512i lo = split_nibbles_2x128(bcast2x128(b0 + kQs, b1 + kQs));
  const __mmask64 high = _cvtu64_mask64(load_u32(b0 + kQh) | static_cast<uint64_t>(load_u32(b1 + kQh)) << 32);
  return _mm512_mask_add_epi8(lo, high, lo, _mm512_set1_epi8(16));
}
struct Q5_0Fmt {
  static constexpr size_t kBytes = kQ5_0Bytes;
  static constexpr int kZero = 16;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static constexpr int kMinOffset = -1;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return q5_codes<2, 6>(b0, b1); }
};
struct Q5_1Fmt {
  static constexpr size_t kBytes = kQ5_1Bytes;
  static constexpr int kZero = 0;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static constexpr int kMinOffset = 2;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return q5_codes<4, 8>(b0, b1); }
};
// Q8_0: signed codes made unsigned by flipping the sign bit (q + 128).
struct Q8_0Fmt {
  static constexpr size_t kBytes = kQ8_0Bytes;
  static constexpr int kZero = 128;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static constexpr int kMinOffset = -1;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    const __m512i q = _mm512_inserti64x4(_mm512_zextsi256_si512(load256(b0 + 2)), load256(b1 + 2), 1);
    return _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};
// MXFP4: doubled E2M1 values + 12 (unsigned) by a 16-entry table; the scale is 2^(e−128).
struct Mxfp4Fmt {
  static constexpr size_t kBytes = kMxfp4Bytes;
  static constexpr int kZero = 12;
  static constexpr ScaleKind kScale = ScaleKind::E8M0;
  static constexpr int kMinOffset = -1;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_shuffle_epi8(table(), split_nibbles_2x128(bcast2x128(b0 + 1, b1 + 1)));
  }
  static void quad(const uint8_t* b, __m512i& lo, __m512i& hi) {
    quad_nibbles<kBytes, 1>(b, lo, hi);
    lo = _mm512_shuffle_epi8(table(), lo);
    hi = _mm512_shuffle_epi8(table(), hi);
  }
  static __m512i table() {
    return _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  }
};

// Block scales of 16 blocks starting at `blk` (lanes beyond `k`: 0).
// The f16 at byte `off` of each of min(n, 16) blocks of kBytes ≤ 20 (lanes beyond: 0): four
// blocks lie within one 64-byte load, their f16 at words 0, kBytes/2, kBytes, 3·kBytes/2 — one
// vpermw per four blocks instead of a gather.
template <size_t kBytes>
inline __m512 f16_of_blocks(const uint8_t* blk, int64_t n, int off) {
  static_assert(kBytes % 2 == 0 && 3 * kBytes + 2 <= 64);
  constexpr int w = static_cast<int>(kBytes / 2);
  const __m512i idx = _mm512_broadcast_i64x2(_mm_setr_epi16(0, w, 2 * w, 3 * w, 0, w, 2 * w, 3 * w));
  __m512i words = _mm512_setzero_si512();
  K3_UNROLL
  for (int q = 0; q < 4; ++q) {
    if (4 * q >= n) break;
    const uint8_t* p = blk + 4 * q * kBytes + off;
    const int64_t bytes = (n - 4 * q) * static_cast<int64_t>(kBytes) - off;  // to the end of block n - 1
    const __m512i v = bytes >= 64 ? load512(p) : _mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, static_cast<unsigned>(bytes)), p);
    words = _mm512_mask_permutexvar_epi16(words, static_cast<__mmask32>(0xFu << (4 * q)), idx, v);
  }
  return _mm512_cvtph_ps(_mm512_castsi512_si256(words));
}

template <class F>
inline __m512 block_scales(const uint8_t* blk, __m512i idx, __mmask16 k, int64_t n) {
  if constexpr (F::kScale == ScaleKind::F16 && F::kBytes <= 20) {
    return f16_of_blocks<F::kBytes>(blk, n, 0);
  } else if constexpr (F::kScale == ScaleKind::F16) {
    return gather_f16(blk, idx, k);
  } else {
    // 2^(e−128): (e − 1) << 23 for e ≥ 2, the subnormals 2^-127, 2^-128 below.
    const __m512i e = _mm512_and_si512(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, blk, 1),
                                       _mm512_set1_epi32(0xFF));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 is_small = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_small, normal, small));
  }
}

// acc + (codes · x summed per 4 lanes) · [scale[0] ×8, scale[1] ×8].
inline __m512 pair_dot(__m512 acc, __m512i q, __m512i x, const float* scale) {
  const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, x);
  // An 8-byte load (inside one of the staging stores, so it is store-forwarded) expanded in lanes.
  const __m128 two = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(scale)));
  const __m512 s = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                         _mm512_castps128_ps512(two));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc);
}

// acc + (low nibbles · x[0..63] + high nibbles · x[64..127]) · [scale[0] ×4, .., scale[3] ×4].
inline __m512 quad_dot(__m512 acc, __m512i lo, __m512i hi, const int8_t* x, const float* scale) {
  const __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, load512(x)), hi, load512(x + 64));
  const __m512 s = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                         _mm512_castps128_ps512(_mm_loadu_ps(scale)));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc);
}

template <class F>
inline constexpr bool kQuads = requires(const uint8_t* b, __m512i& v) { F::quad(b, v, v); };

template <class F, int NT>
void rows32(const RowsArgs& r) {
  constexpr int64_t kSeg = 64;  // blocks whose scales are staged at a time
  alignas(64) float scale[NT][kSeg + 16];
  const __m512i gather_idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32(static_cast<int>(F::kBytes)));
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    // Two accumulator sets (alternate block pairs) hide the FMA latency; every index below is a
    // compile-time constant after unrolling, so they stay in registers.
    __m512 acc0[NT], acc1[NT], corr[NT];
    K3_UNROLL
    for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = corr[t] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < r.nblocks; b0 += kSeg) {
      const int64_t nb = std::min(kSeg, r.nblocks - b0);
      const uint8_t* seg = w + b0 * F::kBytes;
      // Scales: scale[t][j] = d_w · d_x; corr += (m − z·d_w) · d_x·Σx per block.
      for (int64_t j = 0; j < nb; j += 16) {
        const __mmask16 k = nb - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (nb - j)) - 1);
        const uint8_t* blk = seg + j * F::kBytes;
        const __m512 dw = block_scales<F>(blk, gather_idx, k, nb - j);
        __m512 c = _mm512_mul_ps(dw, _mm512_set1_ps(-static_cast<float>(F::kZero)));
        if constexpr (F::kMinOffset >= 0 && F::kBytes <= 20) c = f16_of_blocks<F::kBytes>(blk, nb - j, F::kMinOffset);
        if constexpr (F::kMinOffset >= 0 && F::kBytes > 20) c = gather_f16(blk + F::kMinOffset, gather_idx, k);
        K3_UNROLL
        for (int t = 0; t < NT; ++t) {
          _mm512_store_ps(scale[t] + j, _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(k, a[t].d + b0 + j)));
          corr[t] = _mm512_fmadd_ps(c, _mm512_maskz_loadu_ps(k, a[t].dsum + b0 + j), corr[t]);
        }
      }
      // Σ codes·x per block by VNNI, two blocks per zmm, times the staged scales.
      const int8_t* x[NT];
      K3_UNROLL
      for (int t = 0; t < NT; ++t) x[t] = a[t].q + 32 * b0;
      int64_t j = 0;
      if constexpr (kQuads<F>) {
        // Whole groups of 4 blocks against NibbleQuads codes: per 128-bit lane one block,
        // low nibbles · elements 0..15 + high nibbles · 16..31 → 4 int32 lanes per block.
        for (; j + 8 <= nb; j += 8) {
          const uint8_t* blk = seg + j * F::kBytes;
          prefetch_stream<8 * F::kBytes>(blk);
          __m512i lo0, hi0, lo1, hi1;
          F::quad(blk, lo0, hi0);
          F::quad(blk + 4 * F::kBytes, lo1, hi1);
          K3_UNROLL
          for (int t = 0; t < NT; ++t) {
            acc0[t] = quad_dot(acc0[t], lo0, hi0, x[t] + 32 * j, scale[t] + j);
            acc1[t] = quad_dot(acc1[t], lo1, hi1, x[t] + 32 * j + 128, scale[t] + j + 4);
          }
        }
        if (j + 4 <= nb) {
          const uint8_t* blk = seg + j * F::kBytes;
          prefetch_stream<4 * F::kBytes>(blk);
          __m512i lo, hi;
          F::quad(blk, lo, hi);
          K3_UNROLL
          for (int t = 0; t < NT; ++t) acc0[t] = quad_dot(acc0[t], lo, hi, x[t] + 32 * j, scale[t] + j);
          j += 4;
        }
      } else {
        for (; j + 4 <= nb; j += 4) {
          const uint8_t* blk = seg + j * F::kBytes;
          prefetch_stream<4 * F::kBytes>(blk);
          const __m512i q0 = F::codes(blk, blk + F::kBytes), q1 = F::codes(blk + 2 * F::kBytes, blk + 3 * F::kBytes);
          K3_UNROLL
          for (int t = 0; t < NT; ++t) {
            acc0[t] = pair_dot(acc0[t], q0, load512(x[t] + 32 * j), scale[t] + j);
            acc1[t] = pair_dot(acc1[t], q1, load512(x[t] + 32 * j + 64), scale[t] + j + 2);
          }
        }
      }
      for (; j < nb; j += 2) {  // the last pair, or the last block alone (upper half zero)
        const uint8_t* blk = seg + j * F::kBytes;
        const bool single = j + 1 == nb;
        const __m512i q = single ? _mm512_maskz_mov_epi32(0x00FF, F::codes(blk, blk)) : F::codes(blk, blk + F::kBytes);
        K3_UNROLL
        for (int t = 0; t < NT; ++t) {
          const __m512i xv = single ? _mm512_zextsi256_si512(load256(x[t] + 32 * j)) : load512(x[t] + 32 * j);
          acc0[t] = pair_dot(acc0[t], q, xv, scale[t] + j);
        }
      }
    }
    K3_UNROLL
    for (int t = 0; t < NT; ++t) out[t] = hsum(_mm512_add_ps(_mm512_add_ps(acc0[t], acc1[t]), corr[t]));
  });
}

// ---- 256-element K-quant super-blocks ----------------------------------------------------
//
// Super-blocks are taken in groups of up to 4: the group prologue unpacks the 4 super-blocks'
// scale fields side by side in the 128-bit lanes of one zmm, converts their f16 d (and dmin) with
// one gather and stages d·d_x per token, and adds the min / offset terms (Σ_g m_g·Σx_g) of all 4
// with a few vector ops. Each super-block then only multiplies its codes (vpmaddubsw) and sums
// them with its sub-block scales as int16 weights (vpdpwssd) into int32, converted and scaled by
// d·d_x once.

constexpr int kGroup = 4;

// isum += Σ pairs of prod·scales (int16 → int32); the first term of a chain starts it with
// vpmaddwd instead of accumulating into a zeroed register.
inline __m512i scaled_sum(bool first, __m512i isum, __m512i prod, __m512i scales) {
  return first ? _mm512_madd_epi16(prod, scales) : _mm512_dpwssd_epi32(isum, prod, scales);
}

alignas(64) constexpr int64_t kLaneOf[kGroup][8] = {
    {0, 1, 0, 1, 0, 1, 0, 1}, {2, 3, 2, 3, 2, 3, 2, 3}, {4, 5, 4, 5, 4, 5, 4, 5}, {6, 7, 6, 7, 6, 7, 6, 7}};
// 128-bit lane i of v in all four lanes.
inline __m512i lane_bcast(__m512i v, int i) { return _mm512_permutexvar_epi64(_mm512_load_si512(kLaneOf[i]), v); }

// 16 bytes at `off` of each of the n super-blocks of the group, lane i = super-block i (lanes ≥ n
// repeat the last one, whose terms the callers mask out).
template <size_t kBytes>
inline __m512i group_fields(const uint8_t* blk0, int n, int off) {
  __m512i v = _mm512_zextsi128_si512(load128(blk0 + off));
  v = _mm512_inserti32x4(v, load128(blk0 + std::min(1, n - 1) * kBytes + off), 1);
  v = _mm512_inserti32x4(v, load128(blk0 + std::min(2, n - 1) * kBytes + off), 2);
  return _mm512_inserti32x4(v, load128(blk0 + std::min(3, n - 1) * kBytes + off), 3);
}

// The f16 pairs at `off` of the group's super-blocks as [p0, q0, p1, q1, ...] (lanes ≥ 2n: 0).
template <size_t kBytes>
inline __m256 group_f16_pairs(const uint8_t* blk0, int n, int off) {
  const __m128i idx = _mm_setr_epi32(0, kBytes, 2 * kBytes, 3 * kBytes);
  const __m128i raw = _mm_mmask_i32gather_epi32(_mm_setzero_si128(), static_cast<__mmask8>((1u << n) - 1), idx, blk0 + off, 1);
  return _mm256_cvtph_ps(raw);
}

// d_x of the group's super-blocks, each twice: [x0, x0, x1, x1, ...] (lanes ≥ 2n: 0).
inline __m256 group_dx(const TokenActs& a, int64_t g0, int n) {
  const __m256 v = _mm256_castps128_ps256(_mm_maskz_loadu_ps(static_cast<__mmask8>((1u << n) - 1), a.d + g0));
  return _mm256_permutexvar_ps(_mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), v);
}

// The group's 16 signed or unsigned bytes per super-block (lanes) as int16: [sb0, sb1], [sb2, sb3].
template <bool kSigned>
inline void group_words(__m512i bytes, __m512i& w01, __m512i& w23) {
  if constexpr (kSigned) {
    w01 = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(bytes));
    w23 = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(bytes, 1));
  } else {
    w01 = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(bytes));
    w23 = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(bytes, 1));
  }
}

// Σ_g c_g·Σx_g per super-block for int16 coefficients c of 16 groups (w01, w23 as group_words),
// times `scale` per super-block ([s0, _, s1, _, ...] as staged): acc += Σ over the group.
inline __m512 group_terms16(__m512 acc, __m512i w01, __m512i w23, const int16_t* s16, int n, __m256 scale) {
  const unsigned words = 16u * static_cast<unsigned>(n);
  const __m512i p01 = _mm512_madd_epi16(w01, _mm512_maskz_loadu_epi16(_bzhi_u32(~0u, words), s16));
  const __m512i p23 = _mm512_madd_epi16(w23, _mm512_maskz_loadu_epi16(words > 32 ? _bzhi_u32(~0u, words - 32) : 0u, s16 + 32));
  const __m512 e01 = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), _mm512_castps256_ps512(scale));
  const __m512 e23 = _mm512_permutexvar_ps(_mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6), _mm512_castps256_ps512(scale));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(p23), e23, _mm512_fmadd_ps(_mm512_cvtepi32_ps(p01), e01, acc));
}

// Q2_K, 84 bytes: u8 scales[16] (sc_g low nibble, m_g high nibble); u8 qs[64]; f16 d, dmin.
// Element 128h + 32s + l = bits 2s of qs[32h + l]; group g = element / 16.
// Σ w·x = d·d_x·Σ_g sc_g·Σ q·x − dmin·d_x·Σ_g m_g·Σ x.
struct Q2_KFmt {
  static constexpr size_t kBytes = kQ2_KBytes;
  static constexpr int kDLane = 0;  // where group() stages d·d_x of super-block i: dd[t][2i + kDLane]
  struct Group {
    __m512i sc;  // lanes: sc_g bytes of each super-block
  };
  template <int NT>
  K3_ALWAYS_INLINE static Group group(const uint8_t* blk0, int n, const TokenActs* a, int64_t g0, float (*dd)[8],
                                      __m512 (&minus)[NT]) {
    const __m512i raw = group_fields<kBytes>(blk0, n, 0);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i m01, m23;
    group_words<false>(_mm512_and_si512(_mm512_srli_epi16(raw, 4), low4), m01, m23);
    const __m256 pairs = group_f16_pairs<kBytes>(blk0, n, 80);
    K3_UNROLL
    for (int t = 0; t < NT; ++t) {
      const __m256 s = _mm256_mul_ps(pairs, group_dx(a[t], g0, n));  // [d·d_x, dmin·d_x] per super-block
      _mm256_store_ps(dd[t], s);
      minus[t] = group_terms16(minus[t], m01, m23, a[t].s16 + 16 * g0, n,
                               _mm256_permute_ps(s, _MM_SHUFFLE(3, 3, 1, 1)));
    }
    return {_mm512_and_si512(raw, low4)};
  }
  template <int NT>
  K3_ALWAYS_INLINE static void super_block(const uint8_t* blk, int i, const Group& g, const TokenActs* a, int64_t b,
                                           __m512i (&isum)[NT][2]) {
    const __m512i sc = lane_bcast(g.sc, i);
    const __m512i three = _mm512_set1_epi8(3);
    K3_UNROLL
    for (int h = 0; h < 2; ++h) {
      const __m512i qs = bcast256(blk + 16 + 32 * h);
      K3_UNROLL
      for (int p = 0; p < 2; ++p) {
        const int v = 2 * h + p;  // elements 64v .. 64v + 63: groups 4v .. 4v + 3 (one per 128-bit lane)
        const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(qs, shifts_by_half(4 * p, 4 * p + 2)), three);
        const __m512i scales = _mm512_shuffle_epi8(sc, lane_words(4 * v, 4 * v + 1, 4 * v + 2, 4 * v + 3));
        K3_UNROLL
        for (int t = 0; t < NT; ++t) {
          const __m512i prod = _mm512_maddubs_epi16(q, load512(a[t].q + 256 * b + 64 * v));
          isum[t][p] = scaled_sum(h == 0, isum[t][p], prod, scales);
        }
      }
    }
  }
};

// Q3_K, 110 bytes: u8 hmask[32]; u8 qs[64]; u8 scales[12] (16 signed 6-bit scales); f16 d.
// Code u = 2 low bits (as Q2_K) | hmask bit 4h + s of byte l << 2; w = d·s_g·(u − 4).
// Σ w·x = d·d_x·(Σ_g s_g·Σ u·x − 4·Σ_g s_g·Σ x).
struct Q3_KFmt {
  static constexpr size_t kBytes = kQ3_KBytes;
  static constexpr int kDLane = 1;  // d is gathered as the high half of bytes 106..109 (no read past the block)
  struct Group {
    __m512i s01, s23;  // the 16 scales of super-blocks 0, 1 and 2, 3 as int16
  };
  template <int NT>
  K3_ALWAYS_INLINE static Group group(const uint8_t* blk0, int n, const TokenActs* a, int64_t g0, float (*dd)[8],
                                      __m512 (&minus)[NT]) {
    // Per lane (12 bytes at 96): low 4 bits = bytes 0..7 low nibbles (scales 0..7), high
    // nibbles (8..15); high 2 bits = byte 8 + j%4 at bit 2·(j/4).
    // bytes 94..109 shifted down by 2 (a 16-byte load at 96 would read past the block's end)
    const __m512i raw = _mm512_bsrli_epi128(group_fields<kBytes>(blk0, n, 94), 2);
    const __m512i low = _mm512_and_si512(_mm512_unpacklo_epi64(raw, _mm512_srli_epi16(raw, 4)), _mm512_set1_epi8(0x0F));
    const __m512i h = _mm512_shuffle_epi32(raw, _MM_PERM_CCCC);
    const __m512i high = _mm512_and_si512(_mm512_srlv_epi32(h, _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6)),
                                          _mm512_set1_epi8(3));
    const __m512i sc = _mm512_sub_epi8(_mm512_or_si512(low, _mm512_slli_epi16(high, 4)), _mm512_set1_epi8(32));
    Group g;
    group_words<true>(sc, g.s01, g.s23);
    const __m256 pairs = group_f16_pairs<kBytes>(blk0, n, 106);  // [(bytes 106, 107), d, ...]
    K3_UNROLL
    for (int t = 0; t < NT; ++t) {
      const __m256 s = _mm256_mul_ps(pairs, group_dx(a[t], g0, n));
      _mm256_store_ps(dd[t], s);
      minus[t] = group_terms16(minus[t], g.s01, g.s23, a[t].s16 + 16 * g0, n,
                               _mm256_permute_ps(_mm256_mul_ps(s, _mm256_set1_ps(4.0f)), _MM_SHUFFLE(3, 3, 1, 1)));
    }
    return g;
  }
  template <int NT>
  K3_ALWAYS_INLINE static void super_block(const uint8_t* blk, int i, const Group& g, const TokenActs* a, int64_t b,
                                           __m512i (&isum)[NT][2]) {
    const __m512i words = i < 2 ? g.s01 : g.s23;
    const int base = 16 * (i % 2);
    const __m512i hm = bcast256(blk);
    const __m512i three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    K3_UNROLL
    for (int h = 0; h < 2; ++h) {
      const __m512i qs = bcast256(blk + 32 + 32 * h);
      K3_UNROLL
      for (int p = 0; p < 2; ++p) {
        const int v = 2 * h + p, bit = 4 * h + 2 * p;
        const __mmask64 high = _mm512_test_epi8_mask(
            hm, _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << bit)), _mm256_set1_epi8(static_cast<char>(1 << (bit + 1))), 1));
        const __m512i lo = _mm512_and_si512(_mm512_srlv_epi64(qs, shifts_by_half(4 * p, 4 * p + 2)), three);
        const __m512i q = _mm512_mask_add_epi8(lo, high, lo, four);
        const __m512i scales =
            _mm512_permutexvar_epi16(lane_word_index(base + 4 * v, base + 4 * v + 1, base + 4 * v + 2, base + 4 * v + 3), words);
        K3_UNROLL
        for (int t = 0; t < NT; ++t) {
          const __m512i prod = _mm512_maddubs_epi16(q, load512(a[t].q + 256 * b + 64 * v));
          isum[t][p] = scaled_sum(h == 0, isum[t][p], prod, scales);
        }
      }
    }
  }
};

// Q4_K / Q5_K, 144 / 176 bytes: f16 d, dmin; u8 scales[12] (8 six-bit scales sc_j and mins m_j);
// [Q5_K: u8 qh[32]]; u8 qs[128]. Chunk c of 64 elements = low nibbles of qs[32c ..] (sub-block
// 2c) then high nibbles (2c + 1); Q5_K adds 16 where bit 2c (2c + 1) of qh[l] is set.
// Σ w·x = d·d_x·Σ_j sc_j·Σ q·x − dmin·d_x·Σ_j m_j·Σ x.
template <bool kFive>
struct QK4Fmt {
  static constexpr size_t kBytes = kFive ? kQ5_KBytes : kQ4_KBytes;
  static constexpr int kQs = kFive ? 48 : 16;
  static constexpr int kDLane = 0;
  struct Group {
    __m512i scm;  // lanes: [sc0..7 | m0..7] of each super-block
  };
  template <int NT>
  K3_ALWAYS_INLINE static Group group(const uint8_t* blk0, int n, const TokenActs* a, int64_t g0, float (*dd)[8],
                                      __m512 (&minus)[NT]) {
    // Per lane, 32-bit words A = bytes 4..7, B = 8..11, C = 12..15 of the super-block:
    // sc0..3 = A & 63, m0..3 = B & 63, sc4..7 = C & 15 | (A >> 6) << 4, m4..7 = C >> 4 | (B >> 6) << 4.
    const __m512i raw = group_fields<kBytes>(blk0, n, 4);
    const __m512i acbc = _mm512_shuffle_epi32(raw, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(2, 1, 2, 0)));
    const __m512i aabb = _mm512_shuffle_epi32(raw, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(1, 1, 0, 0)));
    const __m512i low = _mm512_and_si512(_mm512_srlv_epi32(acbc, _mm512_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4)),
                                         _mm512_broadcast_i32x4(_mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F)));
    const __m512i high = _mm512_and_si512(_mm512_srli_epi32(aabb, 2), _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
    const __m512i scm = _mm512_or_si512(low, high);
    // mins as int16 (bytes 8..15 of each lane), times Σx per 32 (8 per super-block, contiguous)
    const __m512i mins = _mm512_shuffle_epi8(scm, _mm512_broadcast_i32x4(_mm_setr_epi8(8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1)));
    const __m256 pairs = group_f16_pairs<kBytes>(blk0, n, 0);
    const __mmask32 words = _bzhi_u32(~0u, 8u * static_cast<unsigned>(n));
    K3_UNROLL
    for (int t = 0; t < NT; ++t) {
      const __m256 s = _mm256_mul_ps(pairs, group_dx(a[t], g0, n));
      _mm256_store_ps(dd[t], s);
      const __m512i p = _mm512_madd_epi16(mins, _mm512_maskz_loadu_epi16(words, a[t].s32 + 8 * g0));
      const __m512 e = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7), _mm512_castps256_ps512(s));
      minus[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), e, minus[t]);
    }
    return {scm};
  }
  template <int NT>
  K3_ALWAYS_INLINE static void super_block(const uint8_t* blk, int i, const Group& g, const TokenActs* a, int64_t b,
                                           __m512i (&isum)[NT][2]) {
    const __m512i sc = lane_bcast(g.scm, i);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i qh;
    if constexpr (kFive) qh = bcast256(blk + 16);
    K3_UNROLL
    for (int c = 0; c < 4; ++c) {
      __m512i q = _mm512_and_si512(_mm512_srlv_epi64(bcast256(blk + kQs + 32 * c), shifts_by_half(0, 4)), low4);
      if constexpr (kFive) {
        const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))), _mm256_set1_epi8(static_cast<char>(2 << (2 * c))), 1);
        q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bits), q, _mm512_set1_epi8(16));
      }
      const __m512i scales = _mm512_shuffle_epi8(sc, lane_words(2 * c, 2 * c, 2 * c + 1, 2 * c + 1));
      K3_UNROLL
      for (int t = 0; t < NT; ++t) {
        const __m512i prod = _mm512_maddubs_epi16(q, load512(a[t].q + 256 * b + 64 * c));
        isum[t][c & 1] = scaled_sum(c < 2, isum[t][c & 1], prod, scales);
      }
    }
  }
};

// Q6_K, 210 bytes: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d. Per half h of 128 elements:
// ql[64h ..] 64 bytes, qh[32h ..] 32 bytes; element 128h + 32Q + l:
//   Q=0: ql[l] & 15 | (qh[l] & 3) << 4      Q=1: ql[l+32] & 15 | (qh[l] >> 2 & 3) << 4
//   Q=2: ql[l] >> 4 | (qh[l] >> 4 & 3) << 4 Q=3: ql[l+32] >> 4 | (qh[l] >> 6) << 4
// w = d·sc_g·(q − 32). Σ w·x = d·d_x·(Σ_g sc_g·Σ q·x − 32·Σ_g sc_g·Σ x).
struct Q6_KFmt {
  static constexpr size_t kBytes = kQ6_KBytes;
  static constexpr int kDLane = 1;
  struct Group {
    __m512i s01, s23;
  };
  template <int NT>
  K3_ALWAYS_INLINE static Group group(const uint8_t* blk0, int n, const TokenActs* a, int64_t g0, float (*dd)[8],
                                      __m512 (&minus)[NT]) {
    Group g;
    group_words<true>(group_fields<kBytes>(blk0, n, 192), g.s01, g.s23);
    const __m256 pairs = group_f16_pairs<kBytes>(blk0, n, 206);  // [(bytes 206, 207), d, ...]
    K3_UNROLL
    for (int t = 0; t < NT; ++t) {
      const __m256 s = _mm256_mul_ps(pairs, group_dx(a[t], g0, n));
      _mm256_store_ps(dd[t], s);
      minus[t] = group_terms16(minus[t], g.s01, g.s23, a[t].s16 + 16 * g0, n,
                               _mm256_permute_ps(_mm256_mul_ps(s, _mm256_set1_ps(32.0f)), _MM_SHUFFLE(3, 3, 1, 1)));
    }
    return g;
  }
  template <int NT>
  K3_ALWAYS_INLINE static void super_block(const uint8_t* blk, int i, const Group& g, const TokenActs* a, int64_t b,
                                           __m512i (&isum)[NT][2]) {
    const __m512i words = i < 2 ? g.s01 : g.s23;
    const int base = 16 * (i % 2);
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    K3_UNROLL
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = load512(blk + 64 * h);
      const __m512i qh = bcast256(blk + 128 + 32 * h);
      K3_UNROLL
      for (int p = 0; p < 2; ++p) {
        const int v = 2 * h + p;  // elements 64v .. 64v + 63: quarters 2p, 2p + 1
        const __m512i lo = _mm512_and_si512(p == 0 ? ql : _mm512_srli_epi16(ql, 4), low4);
        const __m512i hi = _mm512_and_si512(
            p == 0 ? _mm512_sllv_epi64(qh, shifts_by_half(4, 2)) : _mm512_srlv_epi64(qh, shifts_by_half(0, 2)), bits45);
        const __m512i q = _mm512_or_si512(lo, hi);
        const __m512i scales =
            _mm512_permutexvar_epi16(lane_word_index(base + 4 * v, base + 4 * v + 1, base + 4 * v + 2, base + 4 * v + 3), words);
        K3_UNROLL
        for (int t = 0; t < NT; ++t) {
          const __m512i prod = _mm512_maddubs_epi16(q, load512(a[t].q + 256 * b + 64 * v));
          isum[t][p] = scaled_sum(h == 0, isum[t][p], prod, scales);
        }
      }
    }
  }
};

// One group of n super-blocks starting at g0 (n = kGroup is inlined with every mask and index a
// constant; the last, partial group of a row takes the general path).
template <class K, int NT>
K3_ALWAYS_INLINE void kquant_group(const uint8_t* w, int64_t g0, int n, const TokenActs* a, __m512 (&acc)[NT],
                                   __m512 (&minus)[NT]) {
  const uint8_t* blk0 = w + g0 * K::kBytes;
  alignas(32) float dd[NT][8];  // d·d_x of super-block i at [2i + kDLane], read back as broadcast loads
  const typename K::Group grp = K::template group<NT>(blk0, n, a, g0, dd, minus);
  asm volatile("" ::: "memory");
  K3_UNROLL
  for (int i = 0; i < kGroup; ++i) {
    if (i >= n) break;
    const uint8_t* blk = blk0 + i * K::kBytes;
    prefetch_stream<K::kBytes>(blk);
    __m512i isum[NT][2];  // started by super_block (scaled_sum)
    K::template super_block<NT>(blk, i, grp, a, g0 + i, isum);
    K3_UNROLL
    for (int t = 0; t < NT; ++t) {
      const __m512 total = _mm512_cvtepi32_ps(_mm512_add_epi32(isum[t][0], isum[t][1]));
      acc[t] = _mm512_fmadd_ps(total, _mm512_set1_ps(dd[t][2 * i + K::kDLane]), acc[t]);
    }
  }
}

template <class K, int NT>
void rows_kquant(const RowsArgs& r) {
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    __m512 acc[NT], minus[NT];  // minus: the min / offset terms, subtracted at the end
    K3_UNROLL
    for (int t = 0; t < NT; ++t) acc[t] = minus[t] = _mm512_setzero_ps();
    int64_t g0 = 0;
    for (; g0 + kGroup <= r.nblocks; g0 += kGroup) kquant_group<K, NT>(w, g0, kGroup, a, acc, minus);
    if (g0 < r.nblocks) kquant_group<K, NT>(w, g0, static_cast<int>(r.nblocks - g0), a, acc, minus);
    K3_UNROLL
    for (int t = 0; t < NT; ++t) out[t] = hsum(_mm512_sub_ps(acc[t], minus[t]));
  });
}

template <int NT>
void rows_q2_K(const RowsArgs& r) {
  rows_kquant<Q2_KFmt, NT>(r);
}
template <int NT>
void rows_q3_K(const RowsArgs& r) {
  rows_kquant<Q3_KFmt, NT>(r);
}
template <int NT>
void rows_q4_K(const RowsArgs& r) {
  rows_kquant<QK4Fmt<false>, NT>(r);
}
template <int NT>
void rows_q5_K(const RowsArgs& r) {
  rows_kquant<QK4Fmt<true>, NT>(r);
}
template <int NT>
void rows_q6_K(const RowsArgs& r) {
  rows_kquant<Q6_KFmt, NT>(r);
}

template <int NT>
void rows_q4_0(const RowsArgs& r) {
  rows32<Q4_0Fmt, NT>(r);
}
template <int NT>
void rows_q4_1(const RowsArgs& r) {
  rows32<Q4_1Fmt, NT>(r);
}
template <int NT>
void rows_q5_0(const RowsArgs& r) {
  rows32<Q5_0Fmt, NT>(r);
}
template <int NT>
void rows_q5_1(const RowsArgs& r) {
  rows32<Q5_1Fmt, NT>(r);
}
template <int NT>
void rows_q8_0(const RowsArgs& r) {
  rows32<Q8_0Fmt, NT>(r);
}
template <int NT>
void rows_mxfp4(const RowsArgs& r) {
  rows32<Mxfp4Fmt, NT>(r);
}

constexpr Kernel quads(Kernel k) {
  k.order = CodeOrder::NibbleQuads;
  return k;
}

const Kernel kQ4_0 = quads(K3_GGML_KERNEL(rows_q4_0, "avx512")), kQ4_1 = quads(K3_GGML_KERNEL(rows_q4_1, "avx512")),
             // Q5_0/Q5_1: building the quads' 5th-bit masks costs more than it saves (measured)
             kQ5_0 = K3_GGML_KERNEL(rows_q5_0, "avx512"), kQ5_1 = K3_GGML_KERNEL(rows_q5_1, "avx512"),
             kQ8_0 = K3_GGML_KERNEL(rows_q8_0, "avx512"), kMxfp4 = quads(K3_GGML_KERNEL(rows_mxfp4, "avx512")),
             kQ2_K = K3_GGML_KERNEL(rows_q2_K, "avx512"), kQ3_K = K3_GGML_KERNEL(rows_q3_K, "avx512"),
             kQ4_K = K3_GGML_KERNEL(rows_q4_K, "avx512"), kQ5_K = K3_GGML_KERNEL(rows_q5_K, "avx512"),
             kQ6_K = K3_GGML_KERNEL(rows_q6_K, "avx512");

}  // namespace

K3_GGML_KERNEL_TABLE(find_kernel_avx512)

}  // namespace k3::cpu::ggml
