// AVX2 tier of float_dot.h: 16 weights per step, two accumulators, FMA.
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/kernels/float_dot.h"
#include "core/numeric.h"

namespace k3::cpu {
namespace {

// 8 bf16 / f16 / e4m3 values widened to float32.
inline __m256 bf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
inline __m256 f16x8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
// sign-extended byte << 7, bit 14 (a copy of the sign) cleared: the F16 of e4m3 / 2^8.
inline __m256 e4m3x8_div256(const uint8_t* p) {
  const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i*)p));
  return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16(static_cast<int16_t>(0xBFFF))));
}
inline __m256 f32x8(const float* p) { return _mm256_loadu_ps(p); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <typename T, __m256 (*Load8)(const T*), float (*Scalar)(T)>
float dot(const T* w, const float* x, int64_t k) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    a0 = _mm256_fmadd_ps(Load8(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(Load8(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  float acc = hsum(_mm256_add_ps(a0, a1));
  for (; i < k; ++i) acc += Scalar(w[i]) * x[i];
  return acc;
}

float id(float v) { return v; }
float bf16_scalar(uint16_t v) { return decode_bf16(v); }
float f16_scalar(uint16_t v) { return decode_f16(v); }
float e4m3_scalar(uint8_t v) { return decode_f16(e4m3_to_f16_div256(v)); }

// Per-block E4M3 dot (float_dot.h): vector partial sums per block, the block multiplier applied with
// one FMA, one horizontal sum per row.
float dot_e4m3_blocks(const uint8_t* w, const float* x, const float* scale, int64_t k, int64_t block_k) {
  __m256 acc = _mm256_setzero_ps();
  float tail = 0;
  for (int64_t b0 = 0; b0 < k; b0 += block_k) {
    const int64_t end = std::min(k, b0 + block_k);
    __m256 p0 = _mm256_setzero_ps(), p1 = _mm256_setzero_ps();
    int64_t i = b0;
    for (; i + 16 <= end; i += 16) {
      p0 = _mm256_fmadd_ps(e4m3x8_div256(w + i), _mm256_loadu_ps(x + i), p0);
      p1 = _mm256_fmadd_ps(e4m3x8_div256(w + i + 8), _mm256_loadu_ps(x + i + 8), p1);
    }
    acc = _mm256_fmadd_ps(_mm256_add_ps(p0, p1), _mm256_set1_ps(scale[b0 / block_k]), acc);
    float rest = 0;
    for (; i < end; ++i) rest += e4m3_scalar(w[i]) * x[i];
    tail += scale[b0 / block_k] * rest;
  }
  return hsum(acc) + tail;
}

constexpr FloatDots kAvx2{dot<float, f32x8, id>, dot<uint16_t, bf16x8, bf16_scalar>, dot<uint16_t, f16x8, f16_scalar>,
                          dot_e4m3_blocks};

}  // namespace

const FloatDots& float_dots_avx2() { return kAvx2; }

}  // namespace k3::cpu
