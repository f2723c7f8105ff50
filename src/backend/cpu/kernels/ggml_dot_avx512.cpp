// AVX-512 (F/BW/VL + VNNI) GGML dot kernels. Weights are unpacked in registers to unsigned codes
// in natural element order, 64 per zmm, and multiplied with the int8 activations by VNNI:
//   32-element formats: vpdpbusd per pair of blocks → int32 lanes, 8 per block; the block scales
//     d_w·d_x (computed 16 blocks at a time with a gather) are applied in float per lane, the
//     zero-point / min term Σ_b (m_b − z·d_w,b)·d_x,b·Σx_b once per row from those same scales.
//   K-quants: vpmaddubsw (u8·s8 pairs → int16) then vpdpwssd with the sub-block scales as int16
//     lanes → one int32 accumulator per super-block; d·d_x and dmin·d_x applied in float once per
//     super-block.
#include <immintrin.h>

#include "backend/cpu/kernels/ggml_dot_impl.h"

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

struct Q4_0Fmt {
  static constexpr size_t kBytes = kQ4_0Bytes;
  static constexpr int kZero = 8;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static constexpr int kMinOffset = -1;  // no min
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return split_nibbles_2x128(bcast2x128(b0 + 2, b1 + 2)); }
};
struct Q4_1Fmt {
  static constexpr size_t kBytes = kQ4_1Bytes;
  static constexpr int kZero = 0;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static constexpr int kMinOffset = 2;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return split_nibbles_2x128(bcast2x128(b0 + 4, b1 + 4)); }
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
    const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    return _mm512_shuffle_epi8(table, split_nibbles_2x128(bcast2x128(b0 + 1, b1 + 1)));
  }
};

// Block scales of 16 blocks starting at `blk` (lanes beyond `k`: 0).
template <class F>
inline __m512 block_scales(const uint8_t* blk, __m512i idx, __mmask16 k) {
  if constexpr (F::kScale == ScaleKind::F16) {
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

template <class F, int NT>
void rows32(const RowsArgs& r) {
  constexpr int64_t kSeg = 64;  // blocks whose scales are staged at a time
  alignas(64) float scale[NT][kSeg + 16];
  const __m512i gather_idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32(static_cast<int>(F::kBytes)));
  const __m512i pair_idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    __m512 acc[NT][2], corr[NT];
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = corr[t] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < r.nblocks; b0 += kSeg) {
      const int64_t nb = std::min(kSeg, r.nblocks - b0);
      const uint8_t* seg = w + b0 * F::kBytes;
      // Scales: scale[t][j] = d_w · d_x; corr += (m − z·d_w) · d_x·Σx per block.
      for (int64_t j = 0; j < nb; j += 16) {
        const __mmask16 k = nb - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (nb - j)) - 1);
        const uint8_t* blk = seg + j * F::kBytes;
        const __m512 dw = block_scales<F>(blk, gather_idx, k);
        __m512 c = _mm512_mul_ps(dw, _mm512_set1_ps(-static_cast<float>(F::kZero)));
        if constexpr (F::kMinOffset >= 0) c = gather_f16(blk + F::kMinOffset, gather_idx, k);
        for (int t = 0; t < NT; ++t) {
          _mm512_store_ps(scale[t] + j, _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(k, a[t].d + b0 + j)));
          corr[t] = _mm512_fmadd_ps(c, _mm512_maskz_loadu_ps(k, a[t].dsum + b0 + j), corr[t]);
        }
      }
      // Σ codes·x per block by VNNI, two blocks per zmm, times the staged scales.
      const auto pair = [&](int64_t j, int u, bool single) {
        const uint8_t* blk = seg + j * F::kBytes;
        __m512i q = F::codes(blk, single ? blk : blk + F::kBytes);
        if (single) q = _mm512_maskz_mov_epi32(0x00FF, q);
        for (int t = 0; t < NT; ++t) {
          const int8_t* x = a[t].q + 32 * (b0 + j);
          const __m512i xv = single ? _mm512_zextsi256_si512(load256(x)) : load512(x);
          const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xv);
          const __m512 s = _mm512_permutexvar_ps(pair_idx, _mm512_loadu_ps(scale[t] + j));
          acc[t][u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc[t][u]);
        }
      };
      int64_t j = 0;
      for (; j + 4 <= nb; j += 4) pair(j, 0, false), pair(j + 2, 1, false);
      if (j + 2 <= nb) pair(j, 0, false), j += 2;
      if (j < nb) pair(j, 1, true);
    }
    for (int t = 0; t < NT; ++t) out[t] = hsum(_mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]), corr[t]));
  });
}

// ---- 256-element K-quant super-blocks ----------------------------------------------------

// d·d_x and dmin·d_x of one token as broadcast vectors, from the super-block's f16 pair at p.
struct SuperScales {
  __m512 d;
  __m256 dmin;
};
inline SuperScales super_scales(const uint8_t* p, float dx) {
  const __m128 v = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(p)))), _mm_set1_ps(dx));
  return {_mm512_broadcastss_ps(v), _mm256_broadcastss_ps(_mm_movehdup_ps(v))};
}

// Q2_K: codes 2 bits, element 128h + 32s + l = bits 2s of qs[32h + l]; group g = element / 16
// has scale sc_g (low nibble of byte g) and min m_g (high nibble).
// acc += d·d_x·Σ_g sc_g·Σ q·x ;  acc_min += dmin·d_x·Σ_g m_g·Σ x.
template <int NT>
void rows_q2_K(const RowsArgs& r) {
  const __m512i sc_idx[4] = {lane_words(0, 1, 2, 3), lane_words(4, 5, 6, 7), lane_words(8, 9, 10, 11),
                             lane_words(12, 13, 14, 15)};
  const __m512i shift[2] = {shifts_by_half(0, 2), shifts_by_half(4, 6)};
  const __m512i three = _mm512_set1_epi8(3), low4 = _mm512_set1_epi8(0x0F);
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    __m512 acc[NT];
    __m256 acc_min[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps(), acc_min[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < r.nblocks; ++b) {
      const uint8_t* blk = w + b * kQ2_KBytes;
      const __m512i sc = _mm512_and_si512(_mm512_broadcast_i32x4(load128(blk)), low4);
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(load128(blk), 4), _mm512_castsi512_si128(low4)));
      __m512i isum[NT][2];
      for (int t = 0; t < NT; ++t) isum[t][0] = isum[t][1] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const __m512i qs = bcast256(blk + 16 + 32 * h);
        for (int p = 0; p < 2; ++p) {
          const int v = 2 * h + p;  // elements 64v .. 64v + 63, groups 4v .. 4v + 3
          const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(qs, shift[p]), three);
          const __m512i scales = _mm512_shuffle_epi8(sc, sc_idx[v]);
          for (int t = 0; t < NT; ++t) {
            const __m512i prod = _mm512_maddubs_epi16(q, load512(a[t].q + 256 * b + 64 * v));
            isum[t][p] = _mm512_dpwssd_epi32(isum[t][p], prod, scales);
          }
        }
      }
      for (int t = 0; t < NT; ++t) {
        const SuperScales s = super_scales(blk + 80, a[t].d[b]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(isum[t][0], isum[t][1])), s.d, acc[t]);
        const __m256i m = _mm256_madd_epi16(mins, load256(a[t].s16 + 16 * b));
        acc_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), s.dmin, acc_min[t]);
      }
    }
    for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]) - hsum(acc_min[t]);
  });
}

// Q3_K: code u = 2 low bits (as Q2_K) | hmask bit << 2, element 128h + 32s + l has hmask byte l,
// bit 4h + s; w = d·s_g·(u − 4), s_g signed. isum = Σ_g s_g·Σ u·x − 4·Σ_g s_g·Σ x, times d·d_x.
inline __m128i q3_scales(const uint8_t* s) {
  // Low 4 bits: bytes 0..7 low nibbles (scales 0..7), high nibbles (8..15); high 2 bits: byte
  // 8 + j%4 at bit 2·(j/4).
  const __m128i l = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
  const __m128i low = _mm_and_si128(_mm_unpacklo_epi64(l, _mm_srli_epi16(l, 4)), _mm_set1_epi8(0x0F));
  const __m128i h = _mm_set1_epi32(static_cast<int>(load_u32(s + 8)));
  const __m128i high = _mm_and_si128(_mm_srlv_epi32(h, _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
  return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
}

template <int NT>
void rows_q3_K(const RowsArgs& r) {
  const __m512i sc_idx[4] = {lane_word_index(0, 1, 2, 3), lane_word_index(4, 5, 6, 7), lane_word_index(8, 9, 10, 11),
                             lane_word_index(12, 13, 14, 15)};
  const __m512i shift[2] = {shifts_by_half(0, 2), shifts_by_half(4, 6)};
  const __m512i three = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    __m512 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < r.nblocks; ++b) {
      const uint8_t* blk = w + b * kQ3_KBytes;
      const __m256i sc16 = _mm256_cvtepi8_epi16(q3_scales(blk + 96));
      const __m512i sc = _mm512_zextsi256_si512(sc16);
      const __m512i hm = bcast256(blk);
      __m512i isum[NT][2];
      for (int t = 0; t < NT; ++t) isum[t][0] = isum[t][1] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const __m512i qs = bcast256(blk + 32 + 32 * h);
        for (int p = 0; p < 2; ++p) {
          const int v = 2 * h + p;
          const int bit = 4 * h + 2 * p;
          const __mmask64 high = _mm512_test_epi8_mask(
              hm, _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << bit)),
                                     _mm256_set1_epi8(static_cast<char>(1 << (bit + 1))), 1));
          const __m512i lo = _mm512_and_si512(_mm512_srlv_epi64(qs, shift[p]), three);
          const __m512i q = _mm512_mask_add_epi8(lo, high, lo, four);
          const __m512i scales = _mm512_permutexvar_epi16(sc_idx[v], sc);
          for (int t = 0; t < NT; ++t) {
            const __m512i prod = _mm512_maddubs_epi16(q, load512(a[t].q + 256 * b + 64 * v));
            isum[t][p] = _mm512_dpwssd_epi32(isum[t][p], prod, scales);
          }
        }
      }
      for (int t = 0; t < NT; ++t) {
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(a[t].s16 + 16 * b)), 2);
        const __m512i total = _mm512_sub_epi32(_mm512_add_epi32(isum[t][0], isum[t][1]), _mm512_zextsi256_si512(offset));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_set1_ps(load_f16(blk + 108) * a[t].d[b]), acc[t]);
      }
    }
    for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
  });
}

// Q4_K / Q5_K: sub-block j of 32 has 6-bit scale sc_j and min m_j; chunk c of 64 elements = low
// nibbles of qs[32c ..] (sub-block 2c) then high nibbles (2c+1); Q5_K adds 16 where bit 2c
// (2c+1) of qh[l] is set. acc += d·d_x·Σ_j sc_j·Σ q·x ; acc_min += dmin·d_x·Σ_j m_j·Σ x.
// The 12 packed bytes → [sc0..7 | m0..7] (see unpack_k4_scales), four 32-bit words at a time.
inline __m128i k4_scales(const uint8_t* s) {
  const __m128i v = _mm_setr_epi32(static_cast<int>(load_u32(s)), static_cast<int>(load_u32(s + 4)),
                                   static_cast<int>(load_u32(s + 8)), 0);
  // words A = s[0..3], B = s[4..7], C = s[8..11]
  const __m128i acbc = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // [A, C, B, C]
  const __m128i aabb = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // [A, A, B, B]
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(acbc, _mm_setr_epi32(0, 0, 0, 4)),
                                    _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
  const __m128i high = _mm_and_si128(_mm_srli_epi32(aabb, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(low, high);  // [sc0..3, sc4..7, m0..3, m4..7]
}

template <bool kFive, int NT>
void rows_qk4(const RowsArgs& r) {
  constexpr size_t kBytes = kFive ? kQ5_KBytes : kQ4_KBytes;
  constexpr int kQs = kFive ? 48 : 16;
  const __m512i sc_idx[4] = {lane_words(0, 0, 1, 1), lane_words(2, 2, 3, 3), lane_words(4, 4, 5, 5),
                             lane_words(6, 6, 7, 7)};
  const __m512i nibbles = shifts_by_half(0, 4);
  const __m512i low4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    __m512 acc[NT];
    __m128 acc_min[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps(), acc_min[t] = _mm_setzero_ps();
    for (int64_t b = 0; b < r.nblocks; ++b) {
      const uint8_t* blk = w + b * kBytes;
      const __m128i scm = k4_scales(blk + 4);
      const __m512i sc = _mm512_broadcast_i32x4(scm);
      const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(scm, scm));
      __m512i qh;
      if constexpr (kFive) qh = bcast256(blk + 16);
      __m512i isum[NT][2];
      for (int t = 0; t < NT; ++t) isum[t][0] = isum[t][1] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        __m512i q = _mm512_and_si512(_mm512_srlv_epi64(bcast256(blk + kQs + 32 * c), nibbles), low4);
        if constexpr (kFive) {
          const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))),
                                                  _mm256_set1_epi8(static_cast<char>(2 << (2 * c))), 1);
          q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bits), q, sixteen);
        }
        const __m512i scales = _mm512_shuffle_epi8(sc, sc_idx[c]);
        for (int t = 0; t < NT; ++t) {
          const __m512i prod = _mm512_maddubs_epi16(q, load512(a[t].q + 256 * b + 64 * c));
          isum[t][c & 1] = _mm512_dpwssd_epi32(isum[t][c & 1], prod, scales);
        }
      }
      for (int t = 0; t < NT; ++t) {
        const SuperScales s = super_scales(blk, a[t].d[b]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(isum[t][0], isum[t][1])), s.d, acc[t]);
        const __m128i m = _mm_madd_epi16(mins, load128(a[t].s32 + 8 * b));
        acc_min[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(m), _mm256_castps256_ps128(s.dmin), acc_min[t]);
      }
    }
    for (int t = 0; t < NT; ++t) {
      const __m128 s = _mm_add_ps(acc_min[t], _mm_movehl_ps(acc_min[t], acc_min[t]));
      out[t] = hsum(acc[t]) - _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
    }
  });
}
template <int NT>
void rows_q4_K(const RowsArgs& r) {
  rows_qk4<false, NT>(r);
}
template <int NT>
void rows_q5_K(const RowsArgs& r) {
  rows_qk4<true, NT>(r);
}

// Q6_K: per half h of 128: ql[64h ..] 64 bytes, qh[32h ..] 32 bytes; elements 128h + 32Q + l:
//   Q=0: ql[l] & 15 | (qh[l] & 3) << 4      Q=1: ql[l+32] & 15 | (qh[l] >> 2 & 3) << 4
//   Q=2: ql[l] >> 4 | (qh[l] >> 4 & 3) << 4 Q=3: ql[l+32] >> 4 | (qh[l] >> 6) << 4
// w = d·sc_g·(q − 32), sc_g signed per 16. isum = Σ_g sc_g·Σ q·x − 32·Σ_g sc_g·Σ x, times d·d_x.
template <int NT>
void rows_q6_K(const RowsArgs& r) {
  const __m512i sc_idx[4] = {lane_word_index(0, 1, 2, 3), lane_word_index(4, 5, 6, 7), lane_word_index(8, 9, 10, 11),
                             lane_word_index(12, 13, 14, 15)};
  const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
  const __m512i hi_shift_left[2] = {shifts_by_half(4, 2), shifts_by_half(0, 2)};  // Q=0,1: left; Q=2,3: right
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    __m512 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < r.nblocks; ++b) {
      const uint8_t* blk = w + b * kQ6_KBytes;
      const __m256i sc16 = _mm256_cvtepi8_epi16(load128(blk + 192));
      const __m512i sc = _mm512_zextsi256_si512(sc16);
      __m512i isum[NT][2];
      for (int t = 0; t < NT; ++t) isum[t][0] = isum[t][1] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = load512(blk + 64 * h);
        const __m512i qh = bcast256(blk + 128 + 32 * h);
        for (int p = 0; p < 2; ++p) {
          const int v = 2 * h + p;  // elements 64v .. 64v + 63: quarters 2p, 2p + 1
          const __m512i lo = _mm512_and_si512(p == 0 ? ql : _mm512_srli_epi16(ql, 4), low4);
          const __m512i hi = _mm512_and_si512(
              p == 0 ? _mm512_sllv_epi64(qh, hi_shift_left[0]) : _mm512_srlv_epi64(qh, hi_shift_left[1]), bits45);
          const __m512i q = _mm512_or_si512(lo, hi);
          const __m512i scales = _mm512_permutexvar_epi16(sc_idx[v], sc);
          for (int t = 0; t < NT; ++t) {
            const __m512i prod = _mm512_maddubs_epi16(q, load512(a[t].q + 256 * b + 64 * v));
            isum[t][p] = _mm512_dpwssd_epi32(isum[t][p], prod, scales);
          }
        }
      }
      const float d = load_f16(blk + 208);
      for (int t = 0; t < NT; ++t) {
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(a[t].s16 + 16 * b)), 5);
        const __m512i total = _mm512_sub_epi32(_mm512_add_epi32(isum[t][0], isum[t][1]), _mm512_zextsi256_si512(offset));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_set1_ps(d * a[t].d[b]), acc[t]);
      }
    }
    for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
  });
}

template <class F, int NT>
void rows32_fn(const RowsArgs& r) {
  rows32<F, NT>(r);
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

const Kernel kQ4_0 = K3_GGML_KERNEL(rows_q4_0, "avx512"), kQ4_1 = K3_GGML_KERNEL(rows_q4_1, "avx512"),
             kQ5_0 = K3_GGML_KERNEL(rows_q5_0, "avx512"), kQ5_1 = K3_GGML_KERNEL(rows_q5_1, "avx512"),
             kQ8_0 = K3_GGML_KERNEL(rows_q8_0, "avx512"), kMxfp4 = K3_GGML_KERNEL(rows_mxfp4, "avx512"),
             kQ2_K = K3_GGML_KERNEL(rows_q2_K, "avx512"), kQ3_K = K3_GGML_KERNEL(rows_q3_K, "avx512"),
             kQ4_K = K3_GGML_KERNEL(rows_q4_K, "avx512"), kQ5_K = K3_GGML_KERNEL(rows_q5_K, "avx512"),
             kQ6_K = K3_GGML_KERNEL(rows_q6_K, "avx512");

}  // namespace

const Kernel* find_kernel_avx512(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return &kQ4_0;
    case GgmlType::Q4_1: return &kQ4_1;
    case GgmlType::Q5_0: return &kQ5_0;
    case GgmlType::Q5_1: return &kQ5_1;
    case GgmlType::Q8_0: return &kQ8_0;
    case GgmlType::MXFP4: return &kMxfp4;
    case GgmlType::Q2_K: return &kQ2_K;
    case GgmlType::Q3_K: return &kQ3_K;
    case GgmlType::Q4_K: return &kQ4_K;
    case GgmlType::Q5_K: return &kQ5_K;
    case GgmlType::Q6_K: return &kQ6_K;
    default: return nullptr;
  }
}

}  // namespace k3::cpu::ggml
