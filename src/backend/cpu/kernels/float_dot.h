// Row dot products of float-valued weight storage (F32, BF16, F16, E4M3) with float32
// activations, one implementation per CPU tier (float_dot*.cpp).
#pragma once

#include <cstdint>

#include "backend/cpu/kernels/cpu_isa.h"

namespace k3::cpu {

struct FloatDots {
  float (*f32)(const float* w, const float* x, int64_t k);
  float (*bf16)(const uint16_t* w, const float* x, int64_t k);
  float (*f16)(const uint16_t* w, const float* x, int64_t k);
  // Σ_b scale[b] · Σ_{i in block b} e4m3(w[i]) · x[i] · 2^-8, blocks of block_k (the last may be
  // shorter): each block's multiplier is applied once to its partial sum. The codes are widened
  // through F16 (e4m3 bits << 7 is an f16 of the same value / 2^8, subnormals included), so
  // callers fold kE4m3ViaF16Scale into their scales.
  float (*e4m3_blocks_div256)(const uint8_t* w, const float* x, const float* scale, int64_t k, int64_t block_k);
};
inline constexpr float kE4m3ViaF16Scale = 256.0f;

const FloatDots& float_dots(CpuIsa isa);

// The F16 bit pattern whose value is e4m3(code) / 2^8 (NaN codes 0x7F/0xFF are not preserved).
constexpr uint16_t e4m3_to_f16_div256(uint8_t code) {
  return static_cast<uint16_t>(((code & 0x7F) << 7) | ((code & 0x80) << 8));
}

}  // namespace k3::cpu
