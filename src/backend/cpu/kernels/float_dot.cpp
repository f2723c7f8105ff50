// Portable tier of float_dot.h and the tier dispatch.
#include "backend/cpu/kernels/float_dot.h"

#include <algorithm>

#include "core/numeric.h"

namespace k3::cpu {

const FloatDots& float_dots_avx2();
const FloatDots& float_dots_avx512();

namespace {

float dot_f32(const float* w, const float* x, int64_t k) {
  float acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < k; ++i) acc += w[i] * x[i];
  return acc;
}
float dot_bf16(const uint16_t* w, const float* x, int64_t k) {
  float acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < k; ++i) acc += decode_bf16(w[i]) * x[i];
  return acc;
}
float dot_f16(const uint16_t* w, const float* x, int64_t k) {
  float acc = 0;
  for (int64_t i = 0; i < k; ++i) acc += decode_f16(w[i]) * x[i];
  return acc;
}
float dot_e4m3_blocks_div256(const uint8_t* w, const float* x, const float* scale, int64_t k, int64_t block_k) {
  float acc = 0;
  for (int64_t b0 = 0; b0 < k; b0 += block_k) {
    float part = 0;
    for (int64_t i = b0; i < std::min(k, b0 + block_k); ++i) part += decode_f16(e4m3_to_f16_div256(w[i])) * x[i];
    acc += scale[b0 / block_k] * part;
  }
  return acc;
}

constexpr FloatDots kScalar{dot_f32, dot_bf16, dot_f16, dot_e4m3_blocks_div256};

}  // namespace

const FloatDots& float_dots(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx512: return float_dots_avx512();
    case CpuIsa::Avx2: return float_dots_avx2();
    case CpuIsa::Scalar: break;
  }
  return kScalar;
}

}  // namespace k3::cpu
