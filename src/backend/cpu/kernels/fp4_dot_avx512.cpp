// AVX-512 BF16 tier of the FP4 row-group kernel (fp4_dot.h). Per 64-byte line: four vpermw
// lookups turn the 128 nibbles into four vectors of 16 rows × 2 k as bf16 (the E2M1 values are
// exact in bf16), and vdpbf16ps multiplies each with the broadcast bf16 pair of x — a lane is a
// row, so no horizontal sums. Per block the 16 row scales are decoded once and applied with one
// FMA per token (scale applied to the block's partial sum, never per element).
#include <immintrin.h>

#include "backend/cpu/kernels/fp4_dot.h"
#include "core/numeric.h"

namespace k3::cpu {
namespace {

__m512i e2m1_bf16_table() {
  alignas(64) uint16_t t[32];
  for (int i = 0; i < 32; ++i) t[i] = encode_bf16(kE2M1Values[i & 15]);  // bit 4 of an index is ignored
  return _mm512_load_si512(t);
}

// The 16 row scales of one block as float32. E4M3 goes through F16 (value / 2^8; the caller
// multiplies the result by 2^8), E8M0 is placed in the float exponent (0 → 2^-127, a subnormal).
template <Fp4ScaleCode Code>
inline __m512 decode_scales(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (Code == Fp4ScaleCode::E4m3) {
    const __m256i w = _mm256_cvtepu8_epi16(b);
    const __m256i magnitude = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7F)), 7);
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8);
    return _mm512_cvtph_ps(_mm256_or_si256(magnitude, sign));
  } else {
    const __m512i e = _mm512_cvtepu8_epi32(b);
    const __m512i bits = _mm512_mask_mov_epi32(_mm512_slli_epi32(e, 23), _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                                               _mm512_set1_epi32(0x00400000));
    return _mm512_castsi512_ps(bits);
  }
}

template <Fp4ScaleCode Code, int NT>
void dot_groups(const Fp4Layout& w, const uint16_t* x_bf16, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const __m512i table = e2m1_bf16_table();
  const int64_t lines = w.k / kFp4LineK, blocks = w.k / w.block, lines_per_block = w.block / kFp4LineK;
  const float out_scale = Code == Fp4ScaleCode::E4m3 ? 256.0f : 1.0f;
  for (int64_t g = r0 / kFp4GroupRows; g * kFp4GroupRows < r1; ++g) {
    const uint8_t* codes = w.codes + g * lines * kFp4LineBytes;
    const uint8_t* scales = w.scales + g * blocks * kFp4GroupRows;
    __m512 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      __m512 even[NT], odd[NT];
      for (int t = 0; t < NT; ++t) even[t] = odd[t] = _mm512_setzero_ps();
      for (int64_t o = b * lines_per_block; o < (b + 1) * lines_per_block; ++o) {
        const __m512i line = _mm512_loadu_si512(codes + o * kFp4LineBytes);
        const __m512i idx[4] = {line, _mm512_srli_epi16(line, 4), _mm512_srli_epi16(line, 8), _mm512_srli_epi16(line, 12)};
        for (int j = 0; j < 4; ++j) {
          const __m512bh wj = (__m512bh)_mm512_permutexvar_epi16(idx[j], table);
          for (int t = 0; t < NT; ++t) {
            int32_t pair;
            __builtin_memcpy(&pair, x_bf16 + t * w.k + o * kFp4LineK + 2 * j, sizeof pair);
            const __m512bh xp = (__m512bh)_mm512_set1_epi32(pair);
            if (j % 2 == 0) {
              even[t] = _mm512_dpbf16_ps(even[t], wj, xp);
            } else {
              odd[t] = _mm512_dpbf16_ps(odd[t], wj, xp);
            }
          }
        }
      }
      const __m512 s = decode_scales<Code>(scales + b * kFp4GroupRows);
      for (int t = 0; t < NT; ++t) acc[t] = _mm512_fmadd_ps(_mm512_add_ps(even[t], odd[t]), s, acc[t]);
    }
    const int64_t base = g * kFp4GroupRows;
    uint32_t bits = 0;
    for (int i = 0; i < kFp4GroupRows; ++i) bits |= (base + i >= r0 && base + i < r1 ? 1u : 0u) << i;
    const __mmask16 mask = static_cast<__mmask16>(bits);
    for (int t = 0; t < NT; ++t) {
      _mm512_mask_storeu_ps(y + t * ldy + base, mask, _mm512_mul_ps(acc[t], _mm512_set1_ps(out_scale)));
    }
  }
}

template <Fp4ScaleCode Code>
void dot_rows(const Fp4Layout& w, const uint16_t* x_bf16, int64_t m, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  for (int64_t t0 = 0; t0 < m; t0 += 4) {
    const uint16_t* x = x_bf16 + t0 * w.k;
    float* yt = y + t0 * ldy;
    switch (std::min<int64_t>(4, m - t0)) {
      case 1: dot_groups<Code, 1>(w, x, r0, r1, yt, ldy); break;
      case 2: dot_groups<Code, 2>(w, x, r0, r1, yt, ldy); break;
      case 3: dot_groups<Code, 3>(w, x, r0, r1, yt, ldy); break;
      default: dot_groups<Code, 4>(w, x, r0, r1, yt, ldy); break;
    }
  }
}

void fp4_dot_rows_avx512(const Fp4Layout& w, const uint16_t* x_bf16, int64_t m, int64_t r0, int64_t r1, float* y,
                         int64_t ldy) {
  if (w.scale_code == Fp4ScaleCode::E4m3) return dot_rows<Fp4ScaleCode::E4m3>(w, x_bf16, m, r0, r1, y, ldy);
  dot_rows<Fp4ScaleCode::E8m0>(w, x_bf16, m, r0, r1, y, ldy);
}

}  // namespace

Fp4DotRows fp4_dot_rows_avx512_tier() { return fp4_dot_rows_avx512; }

}  // namespace k3::cpu
