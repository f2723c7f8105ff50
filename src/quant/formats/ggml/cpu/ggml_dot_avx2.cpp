// AVX2 GGML dot kernels: weights unpacked in registers to unsigned codes in natural element order,
// 32 per ymm (one 32-element block or K-quant sub-block pair of 16), multiplied with the int8
// activations by vpmaddubsw (u8·s8 pairs → int16, no saturation for these code ranges) and
// vpmaddwd (→ int32; with the K-quant sub-block scales as the int16 operand).
//   32-element formats: block scales d_w·d_x staged 8 blocks at a time (gather), applied in float
//     per block; the zero-point / min term Σ_b (m_b − z·d_w,b)·d_x,b·Σx_b once per row.
//   K-quants: one int32 accumulator per super-block; d·d_x and dmin·d_x applied once per
//     super-block.
#include <immintrin.h>

#include <algorithm>

#include "quant/formats/ggml/cpu/ggml_dot_impl.h"

namespace k3::cpu::ggml {
namespace {

inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 16 nibble bytes → [lo nibbles | hi nibbles] (elements 0..15, 16..31 of a 32-element block).
inline __m256i split_nibbles(const uint8_t* p) {
  const __m256i v = _mm256_broadcastsi128_si256(load128(p));
  return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}
// 0xFF in byte j where bit j of the 32-bit `bits` is set.
inline __m256i bits_to_bytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i select = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
}
// 0xFF in byte l where byte l of v has any bit of `mask`.
inline __m256i test_bytes(__m256i v, uint8_t mask) {
  const __m256i m = _mm256_set1_epi8(static_cast<char>(mask));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, m), m);
}
// pshufb indices filling every int16 of 128-bit lane L with byte bL (zero-extended).
inline __m256i lane_words(int b0, int b1) {
  const auto w = [](int b) { return static_cast<int>(0x80008000u | static_cast<uint32_t>(b) << 16 | static_cast<uint32_t>(b)); };
  return _mm256_setr_epi32(w(b0), w(b0), w(b0), w(b0), w(b1), w(b1), w(b1), w(b1));
}
// pshufb indices filling every int16 of 128-bit lane L with int16 number iL of that lane.
inline __m256i lane_word_index(int i0, int i1) {
  const auto w = [](int i) { return static_cast<int>(static_cast<uint32_t>(2 * i) | static_cast<uint32_t>(2 * i + 1) << 8) * 0x10001; };
  return _mm256_setr_epi32(w(i0), w(i0), w(i0), w(i0), w(i1), w(i1), w(i1), w(i1));
}
// Σ over pairs of u8·s8 products into int32 lanes (unit int16 weights).
inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)); }

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline __m256 gather_f16(const uint8_t* base, __m256i idx, __m256i lane_ok) {
  const __m256i v = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(base), idx, lane_ok, 1);
  // low 16 bits of each dword → 8 halves
  const __m256i packed = _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0,
                                                                 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
  const __m128i halves = _mm_unpacklo_epi64(_mm256_castsi256_si128(packed), _mm256_extracti128_si256(packed, 1));
  return _mm256_cvtph_ps(halves);
}

// ---- 32-element blocks -------------------------------------------------------------------

enum class ScaleKind { F16, E8M0 };

struct Q4_0Fmt {
  static constexpr size_t kBytes = kQ4_0Bytes;
  static constexpr int kZero = 8, kMinOffset = -1;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static __m256i codes(const uint8_t* b) { return split_nibbles(b + 2); }
};
struct Q4_1Fmt {
  static constexpr size_t kBytes = kQ4_1Bytes;
  static constexpr int kZero = 0, kMinOffset = 2;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static __m256i codes(const uint8_t* b) { return split_nibbles(b + 4); }
};
template <int kQh, int kQs>
inline __m256i q5_codes(const uint8_t* b) {
  return _mm256_or_si256(split_nibbles(b + kQs), _mm256_and_si256(bits_to_bytes(load_u32(b + kQh)), _mm256_set1_epi8(16)));
}
struct Q5_0Fmt {
  static constexpr size_t kBytes = kQ5_0Bytes;
  static constexpr int kZero = 16, kMinOffset = -1;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static __m256i codes(const uint8_t* b) { return q5_codes<2, 6>(b); }
};
struct Q5_1Fmt {
  static constexpr size_t kBytes = kQ5_1Bytes;
  static constexpr int kZero = 0, kMinOffset = 2;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static __m256i codes(const uint8_t* b) { return q5_codes<4, 8>(b); }
};
// Q8_0: signed codes; |q| · (x with q's sign) keeps vpmaddubsw's pair sums within int16 (q + 128
// would saturate them).
struct Q8_0Fmt {
  static constexpr size_t kBytes = kQ8_0Bytes;
  static constexpr int kZero = 0, kMinOffset = -1;
  static constexpr ScaleKind kScale = ScaleKind::F16;
  static __m256i codes(const uint8_t* b) { return load256(b + 2); }
  static __m256i dot(__m256i q, __m256i x) { return dot_u8s8(_mm256_abs_epi8(q), _mm256_sign_epi8(x, q)); }
};
struct Mxfp4Fmt {  // doubled E2M1 + 12
  static constexpr size_t kBytes = kMxfp4Bytes;
  static constexpr int kZero = 12, kMinOffset = -1;
  static constexpr ScaleKind kScale = ScaleKind::E8M0;
  static __m256i codes(const uint8_t* b) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    return _mm256_shuffle_epi8(table, split_nibbles(b + 1));
  }
};

// Σ codes·x per int32 lane: the format's own product where it defines one.
template <class F>
inline __m256i block_dot(__m256i q, __m256i x) {
  if constexpr (requires { F::dot(q, x); }) {
    return F::dot(q, x);
  } else {
    return dot_u8s8(q, x);
  }
}

// acc + (Σ codes·x per lane) · scale.
template <class F>
inline __m256 block_fma(__m256 acc, __m256i q, __m256i x, const float* scale) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot<F>(q, x)), _mm256_broadcast_ss(scale), acc);
}

template <class F>
inline __m256 block_scales(const uint8_t* blk, __m256i idx, __m256i lane_ok) {
  if constexpr (F::kScale == ScaleKind::F16) {
    return gather_f16(blk, idx, lane_ok);
  } else {
    const __m256i e = _mm256_and_si256(
        _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(blk), idx, lane_ok, 1),
        _mm256_set1_epi32(0xFF));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i is_small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, small, is_small));
  }
}

template <class F, int NT>
void rows32(const RowsArgs& r) {
  constexpr int64_t kSeg = 64;
  alignas(32) float scale[NT][kSeg];
  const __m256i gather_idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int>(F::kBytes)));
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    __m256 acc0[NT], acc1[NT], corr[NT];  // two accumulator sets: alternate blocks
    K3_UNROLL
    for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = corr[t] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < r.nblocks; b0 += kSeg) {
      const int64_t nb = std::min(kSeg, r.nblocks - b0);
      const uint8_t* seg = w + b0 * F::kBytes;
      for (int64_t j = 0; j < nb; j += 8) {  // scale[t][j] = d_w·d_x; corr += (m − z·d_w)·d_x·Σx
        const __m256i lane_ok = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nb - j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const uint8_t* blk = seg + j * F::kBytes;
        const __m256 dw = block_scales<F>(blk, gather_idx, lane_ok);
        __m256 c = _mm256_mul_ps(dw, _mm256_set1_ps(-static_cast<float>(F::kZero)));
        if constexpr (F::kMinOffset >= 0) c = gather_f16(blk + F::kMinOffset, gather_idx, lane_ok);
        K3_UNROLL
        for (int t = 0; t < NT; ++t) {
          _mm256_store_ps(scale[t] + j, _mm256_mul_ps(dw, _mm256_maskload_ps(a[t].d + b0 + j, lane_ok)));
          if constexpr (F::kZero != 0 || F::kMinOffset >= 0) {
            corr[t] = _mm256_fmadd_ps(c, _mm256_maskload_ps(a[t].dsum + b0 + j, lane_ok), corr[t]);
          }
        }
      }
      const int8_t* x[NT];
      K3_UNROLL
      for (int t = 0; t < NT; ++t) x[t] = a[t].q + 32 * b0;
      int64_t j = 0;
      for (; j + 2 <= nb; j += 2) {
        const uint8_t* blk = seg + j * F::kBytes;
        prefetch_stream<2 * F::kBytes>(blk);
        const __m256i q0 = F::codes(blk), q1 = F::codes(blk + F::kBytes);
        K3_UNROLL
        for (int t = 0; t < NT; ++t) {
          acc0[t] = block_fma<F>(acc0[t], q0, load256(x[t] + 32 * j), scale[t] + j);
          acc1[t] = block_fma<F>(acc1[t], q1, load256(x[t] + 32 * j + 32), scale[t] + j + 1);
        }
      }
      if (j < nb) {
        const __m256i q = F::codes(seg + j * F::kBytes);
        K3_UNROLL
        for (int t = 0; t < NT; ++t) acc0[t] = block_fma<F>(acc0[t], q, load256(x[t] + 32 * j), scale[t] + j);
      }
    }
    K3_UNROLL
    for (int t = 0; t < NT; ++t) out[t] = hsum(_mm256_add_ps(_mm256_add_ps(acc0[t], acc1[t]), corr[t]));
  });
}

// ---- 256-element K-quant super-blocks (layouts: ggml_dot.cpp, ggml_dot_avx512.cpp) ---------

inline __m128 super_scales(const uint8_t* p, float dx) {  // [d·dx, dmin·dx]
  return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(p)))), _mm_set1_ps(dx));
}
inline float lane(__m128 v, int i) { return i == 0 ? _mm_cvtss_f32(v) : _mm_cvtss_f32(_mm_movehdup_ps(v)); }

// Q2_K: vector (h, s) = elements 128h + 32s .. +31 = bits 2s of qs[32h ..]; groups 8h + 2s (+1).
template <int NT>
void rows_q2_K(const RowsArgs& r) {
  const __m256i three = _mm256_set1_epi8(3), low4 = _mm256_set1_epi8(0x0F);
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    __m256 acc[NT], acc_min[NT];
    K3_UNROLL
    for (int t = 0; t < NT; ++t) acc[t] = acc_min[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < r.nblocks; ++b) {
      const uint8_t* blk = w + b * kQ2_KBytes;
      prefetch_stream<kQ2_KBytes>(blk);
      const __m256i raw = _mm256_broadcastsi128_si256(load128(blk));
      const __m256i sc = _mm256_and_si256(raw, low4);
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(load128(blk), 4), _mm_set1_epi8(0x0F)));
      __m256i isum[NT];
      K3_UNROLL
      for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
      K3_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m256i qs = load256(blk + 16 + 32 * h);
        K3_UNROLL
        for (int s = 0; s < 4; ++s) {
          const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * s), three);
          const __m256i scales = _mm256_shuffle_epi8(sc, lane_words(8 * h + 2 * s, 8 * h + 2 * s + 1));
          K3_UNROLL
          for (int t = 0; t < NT; ++t) {
            const __m256i prod = _mm256_maddubs_epi16(q, load256(a[t].q + 256 * b + 128 * h + 32 * s));
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(prod, scales));
          }
        }
      }
      K3_UNROLL
      for (int t = 0; t < NT; ++t) {
        const __m128 s = super_scales(blk + 80, a[t].d[b]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(lane(s, 0)), acc[t]);
        const __m256i m = _mm256_madd_epi16(mins, load256(a[t].s16 + 16 * b));
        acc_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(lane(s, 1)), acc_min[t]);
      }
    }
    K3_UNROLL
    for (int t = 0; t < NT; ++t) out[t] = hsum(_mm256_sub_ps(acc[t], acc_min[t]));
  });
}

// Signed int16 scales s[0..15] → the 128-bit half holding groups 8h .. 8h+7, in both lanes.
inline __m256i scale_half(__m256i s16, int h) {
  return h == 0 ? _mm256_permute2x128_si256(s16, s16, 0x00) : _mm256_permute2x128_si256(s16, s16, 0x11);
}

// Q3_K: u = 2 low bits (as Q2_K) | hmask bit 4h + s of byte l << 2; w = d·s_g·(u − 4).
inline __m128i q3_scales(const uint8_t* s) {  // see ggml_dot_avx512.cpp
  const __m128i l = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
  const __m128i low = _mm_and_si128(_mm_unpacklo_epi64(l, _mm_srli_epi16(l, 4)), _mm_set1_epi8(0x0F));
  const __m128i h = _mm_set1_epi32(static_cast<int>(load_u32(s + 8)));
  const __m128i high = _mm_and_si128(_mm_srlv_epi32(h, _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
  return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
}

template <int NT>
void rows_q3_K(const RowsArgs& r) {
  const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    __m256 acc[NT];
    K3_UNROLL
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < r.nblocks; ++b) {
      const uint8_t* blk = w + b * kQ3_KBytes;
      prefetch_stream<kQ3_KBytes>(blk);
      const __m256i sc16 = _mm256_cvtepi8_epi16(q3_scales(blk + 96));
      const __m256i hm = load256(blk);
      __m256i isum[NT];
      K3_UNROLL
      for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
      K3_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m256i qs = load256(blk + 32 + 32 * h);
        const __m256i sc = scale_half(sc16, h);
        K3_UNROLL
        for (int s = 0; s < 4; ++s) {
          const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * s), three);
          const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(test_bytes(hm, static_cast<uint8_t>(1 << (4 * h + s))), four));
          const __m256i scales = _mm256_shuffle_epi8(sc, lane_word_index(2 * s, 2 * s + 1));
          K3_UNROLL
          for (int t = 0; t < NT; ++t) {
            const __m256i prod = _mm256_maddubs_epi16(q, load256(a[t].q + 256 * b + 128 * h + 32 * s));
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(prod, scales));
          }
        }
      }
      const float d = load_f16(blk + 108);
      K3_UNROLL
      for (int t = 0; t < NT; ++t) {
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(a[t].s16 + 16 * b)), 2);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum[t], offset)), _mm256_set1_ps(d * a[t].d[b]), acc[t]);
      }
    }
    K3_UNROLL
    for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
  });
}

// Q4_K / Q5_K: chunk c = low nibbles of qs[32c ..] (sub-block 2c) then high nibbles (2c+1).
inline __m128i k4_scales(const uint8_t* s) {  // [sc0..7 | m0..7], see ggml_dot_avx512.cpp
  const __m128i v = _mm_setr_epi32(static_cast<int>(load_u32(s)), static_cast<int>(load_u32(s + 4)),
                                   static_cast<int>(load_u32(s + 8)), 0);
  const __m128i acbc = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));
  const __m128i aabb = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(acbc, _mm_setr_epi32(0, 0, 0, 4)),
                                    _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
  const __m128i high = _mm_and_si128(_mm_srli_epi32(aabb, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(low, high);
}

template <bool kFive, int NT>
void rows_qk4(const RowsArgs& r) {
  constexpr size_t kBytes = kFive ? kQ5_KBytes : kQ4_KBytes;
  constexpr int kQs = kFive ? 48 : 16;
  const __m256i low4 = _mm256_set1_epi8(0x0F), sixteen = _mm256_set1_epi8(16);
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    __m256 acc[NT];
    __m128 acc_min[NT];
    K3_UNROLL
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps(), acc_min[t] = _mm_setzero_ps();
    for (int64_t b = 0; b < r.nblocks; ++b) {
      const uint8_t* blk = w + b * kBytes;
      prefetch_stream<kBytes>(blk);
      const __m128i scm = k4_scales(blk + 4);
      const __m256i sc = _mm256_broadcastsi128_si256(scm);
      const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(scm, scm));
      __m256i qh;
      if constexpr (kFive) qh = load256(blk + 16);
      __m256i isum[NT];
      K3_UNROLL
      for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
      K3_UNROLL
      for (int c = 0; c < 4; ++c) {
        const __m256i qs = load256(blk + kQs + 32 * c);
        K3_UNROLL
        for (int half = 0; half < 2; ++half) {  // sub-block j = 2c + half
          const int j = 2 * c + half;
          __m256i q = _mm256_and_si256(half == 0 ? qs : _mm256_srli_epi16(qs, 4), low4);
          if constexpr (kFive) q = _mm256_or_si256(q, _mm256_and_si256(test_bytes(qh, static_cast<uint8_t>(1 << j)), sixteen));
          const __m256i scales = _mm256_shuffle_epi8(sc, lane_words(j, j));
          K3_UNROLL
          for (int t = 0; t < NT; ++t) {
            const __m256i prod = _mm256_maddubs_epi16(q, load256(a[t].q + 256 * b + 32 * j));
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(prod, scales));
          }
        }
      }
      K3_UNROLL
      for (int t = 0; t < NT; ++t) {
        const __m128 s = super_scales(blk, a[t].d[b]);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(lane(s, 0)), acc[t]);
        const __m128i m = _mm_madd_epi16(mins, load128(a[t].s32 + 8 * b));
        acc_min[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(m), _mm_set1_ps(lane(s, 1)), acc_min[t]);
      }
    }
    K3_UNROLL
    for (int t = 0; t < NT; ++t) {
      const __m128 s = _mm_add_ps(acc_min[t], _mm_movehl_ps(acc_min[t], acc_min[t]));
      out[t] = hsum(acc[t]) - _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
    }
  });
}

// Q6_K: quarter Q of half h = elements 128h + 32Q .. +31 (layout in ggml_dot.cpp).
template <int NT>
void rows_q6_K(const RowsArgs& r) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  const TokenActs* a = r.acts;
  for_each_row<NT>(r, [&](const uint8_t* w, float* out) {
    __m256 acc[NT];
    K3_UNROLL
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < r.nblocks; ++b) {
      const uint8_t* blk = w + b * kQ6_KBytes;
      prefetch_stream<kQ6_KBytes>(blk);
      const __m256i sc16 = _mm256_cvtepi8_epi16(load128(blk + 192));
      __m256i isum[NT];
      K3_UNROLL
      for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
      K3_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = load256(blk + 64 * h), ql1 = load256(blk + 64 * h + 32);
        const __m256i qh = load256(blk + 128 + 32 * h);
        const __m256i sc = scale_half(sc16, h);
        const __m256i hi[4] = {_mm256_slli_epi16(qh, 4), _mm256_slli_epi16(qh, 2), qh, _mm256_srli_epi16(qh, 2)};
        K3_UNROLL
        for (int quarter = 0; quarter < 4; ++quarter) {
          const __m256i ql = quarter % 2 == 0 ? ql0 : ql1;
          const __m256i lo = _mm256_and_si256(quarter < 2 ? ql : _mm256_srli_epi16(ql, 4), low4);
          const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(hi[quarter], bits45));
          const __m256i scales = _mm256_shuffle_epi8(sc, lane_word_index(2 * quarter, 2 * quarter + 1));
          K3_UNROLL
          for (int t = 0; t < NT; ++t) {
            const __m256i prod = _mm256_maddubs_epi16(q, load256(a[t].q + 256 * b + 128 * h + 32 * quarter));
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(prod, scales));
          }
        }
      }
      const float d = load_f16(blk + 208);
      K3_UNROLL
      for (int t = 0; t < NT; ++t) {
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(a[t].s16 + 16 * b)), 5);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum[t], offset)), _mm256_set1_ps(d * a[t].d[b]), acc[t]);
      }
    }
    K3_UNROLL
    for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
  });
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
template <int NT>
void rows_q4_K(const RowsArgs& r) {
  rows_qk4<false, NT>(r);
}
template <int NT>
void rows_q5_K(const RowsArgs& r) {
  rows_qk4<true, NT>(r);
}

const Kernel kQ4_0 = K3_GGML_KERNEL(rows_q4_0, "avx2"), kQ4_1 = K3_GGML_KERNEL(rows_q4_1, "avx2"),
             kQ5_0 = K3_GGML_KERNEL(rows_q5_0, "avx2"), kQ5_1 = K3_GGML_KERNEL(rows_q5_1, "avx2"),
             kQ8_0 = K3_GGML_KERNEL(rows_q8_0, "avx2"), kMxfp4 = K3_GGML_KERNEL(rows_mxfp4, "avx2"),
             kQ2_K = K3_GGML_KERNEL(rows_q2_K, "avx2"), kQ3_K = K3_GGML_KERNEL(rows_q3_K, "avx2"),
             kQ4_K = K3_GGML_KERNEL(rows_q4_K, "avx2"), kQ5_K = K3_GGML_KERNEL(rows_q5_K, "avx2"),
             kQ6_K = K3_GGML_KERNEL(rows_q6_K, "avx2");

}  // namespace

K3_GGML_KERNEL_TABLE(find_kernel_avx2)

}  // namespace k3::cpu::ggml
