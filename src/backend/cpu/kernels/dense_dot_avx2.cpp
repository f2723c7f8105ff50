// AVX2 tier of dense_dot.h: 16 weights per step, two accumulators, FMA.
#include <immintrin.h>

#include "backend/cpu/kernels/dense_dot.h"
#include "core/numeric.h"

namespace k3::cpu {
namespace {

// 8 bf16 / f16 / e4m3 values widened to float32.
inline __m256 bf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
inline __m256 f16x8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
inline __m256 e4m3x8_div256(const uint8_t* p) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i*)p));
  const __m128i magnitude = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7F)), 7);
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8);
  return _mm256_cvtph_ps(_mm_or_si128(magnitude, sign));
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

constexpr DenseDots kAvx2{dot<float, f32x8, id>, dot<uint16_t, bf16x8, bf16_scalar>, dot<uint16_t, f16x8, f16_scalar>,
                          dot<uint8_t, e4m3x8_div256, e4m3_scalar>};

}  // namespace

const DenseDots& dense_dots_avx2() { return kAvx2; }

}  // namespace k3::cpu
