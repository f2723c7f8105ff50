// AVX-512 tier of dense_dot.h: 32 weights per step, two accumulators, FMA.
#include <immintrin.h>

#include "backend/cpu/kernels/dense_dot.h"
#include "core/numeric.h"

namespace k3::cpu {
namespace {

// 16 bf16 / f16 / e4m3 values widened to float32.
inline __m512 bf16x16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
inline __m512 f16x16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p)); }
inline __m512 e4m3x16_div256(const uint8_t* p) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)p));
  const __m256i magnitude = _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7F)), 7);
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8);
  return _mm512_cvtph_ps(_mm256_or_si256(magnitude, sign));
}

template <typename T, __m512 (*Load16)(const T*), float (*Scalar)(T)>
float dot(const T* w, const float* x, int64_t k) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    a0 = _mm512_fmadd_ps(Load16(w + i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(Load16(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
  }
  float acc = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (; i < k; ++i) acc += Scalar(w[i]) * x[i];
  return acc;
}

inline __m512 f32x16(const float* p) { return _mm512_loadu_ps(p); }
float id(float v) { return v; }
float bf16_scalar(uint16_t v) { return decode_bf16(v); }
float f16_scalar(uint16_t v) { return decode_f16(v); }
float e4m3_scalar(uint8_t v) { return decode_f16(e4m3_to_f16_div256(v)); }

constexpr DenseDots kAvx512{dot<float, f32x16, id>, dot<uint16_t, bf16x16, bf16_scalar>,
                            dot<uint16_t, f16x16, f16_scalar>, dot<uint8_t, e4m3x16_div256, e4m3_scalar>};

}  // namespace

const DenseDots& dense_dots_avx512() { return kAvx512; }

}  // namespace k3::cpu
