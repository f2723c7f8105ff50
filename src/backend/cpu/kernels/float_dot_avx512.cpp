// AVX-512 tier of float_dot.h: 32 weights per step, two accumulators, FMA.
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/kernels/float_dot.h"
#include "core/numeric.h"

namespace k3::cpu {
namespace {

// 16 bf16 / f16 / e4m3 values widened to float32.
inline __m512 bf16x16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
inline __m512 f16x16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p)); }
// sign-extended byte << 7 puts the sign at bit 15 and the code at bits 14..7; clearing bit 14 (a
// copy of the sign) leaves the F16 of e4m3 / 2^8.
inline __m512 e4m3x16_div256(const uint8_t* p) {
  const __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)p));
  return _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16(static_cast<int16_t>(0xBFFF))));
}

// Weight bytes ahead to prefetch (rows are streamed once; the hardware prefetcher alone leaves
// DRAM bandwidth unused at one stream per core). Prefetching past a row's end is harmless.
constexpr int64_t kPrefetchBytes = 8192;

template <typename T, __m512 (*Load16)(const T*), float (*Scalar)(T)>
float dot(const T* w, const float* x, int64_t k) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchBytes, _MM_HINT_T0);
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

// Per-block E4M3 dot (float_dot.h): vector partial sums per block, the block multiplier applied with
// one FMA, one horizontal sum per row.
float dot_e4m3_blocks(const uint8_t* w, const float* x, const float* scale, int64_t k, int64_t block_k) {
  __m512 acc = _mm512_setzero_ps();
  float tail = 0;
  for (int64_t b0 = 0; b0 < k; b0 += block_k) {
    const int64_t end = std::min(k, b0 + block_k);
    __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
    int64_t i = b0;
    for (; i + 32 <= end; i += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchBytes, _MM_HINT_T0);
      p0 = _mm512_fmadd_ps(e4m3x16_div256(w + i), _mm512_loadu_ps(x + i), p0);
      p1 = _mm512_fmadd_ps(e4m3x16_div256(w + i + 16), _mm512_loadu_ps(x + i + 16), p1);
    }
    acc = _mm512_fmadd_ps(_mm512_add_ps(p0, p1), _mm512_set1_ps(scale[b0 / block_k]), acc);
    float rest = 0;
    for (; i < end; ++i) rest += e4m3_scalar(w[i]) * x[i];
    tail += scale[b0 / block_k] * rest;
  }
  return _mm512_reduce_add_ps(acc) + tail;
}

constexpr FloatDots kAvx512{dot<float, f32x16, id>, dot<uint16_t, bf16x16, bf16_scalar>,
                            dot<uint16_t, f16x16, f16_scalar>, dot_e4m3_blocks};

}  // namespace

const FloatDots& float_dots_avx512() { return kAvx512; }

}  // namespace k3::cpu
