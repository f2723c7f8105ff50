// 4-bit E2M1 weights with a block scale in the CPU's 16-row interleaved layout, times activations in
// 16-bit fixed point per weight block (ActivationForm::Fixed16): 2·E2M1 is an integer in
// [-12, 12], so each block's dot is an exact integer sum, scaled once by (weight block scale ×
// activation block scale / 2). Repacked once at load (fp4_matrix.cpp) so that one 64-byte line holds 16 rows × 8
// consecutive k, and a vector lane is a row:
//   codes  [groups][K/8][64 bytes]: 16-bit word (2i + p) of a line holds the nibbles of row i at
//          k = 8·o + 2j + p in its nibble j (bits 4j..4j+3), j = 0..3, p = 0..1;
//   scales [groups][K/block][16 bytes]: the block scale byte of each of the 16 rows, in the
//          format's encoding (Fp4ScaleCode); rows past N are zero codes with zero scales.
#pragma once

#include <cstdint>

#include "backend/cpu/kernels/cpu_isa.h"

namespace k3::cpu {

// The encoding of a block scale byte: an e4m3fn value, or an E8M0 power of two 2^(e − 127).
enum class Fp4ScaleCode : uint8_t { E4m3, E8m0 };

struct Fp4Layout {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  int64_t k = 0;      // columns (multiple of block)
  int64_t block = 0;  // columns per block scale (a multiple of kFp4LineK)
  Fp4ScaleCode scale_code = Fp4ScaleCode::E4m3;
};
inline constexpr int64_t kFp4GroupRows = 16, kFp4LineBytes = 64, kFp4LineK = 8;

// The block scale as float32: e4m3fn value, or 2^(e − 127) (E8M0 0 → 2^-127, 255 → NaN).
float fp4_scale_value(Fp4ScaleCode code, uint8_t byte);

// y[t·ldy + r] = Σ_k W[r][k]·x_t[k] for rows r0 ≤ r < r1 (r0 a multiple of 16), tokens t < m;
// x_t[k] = xq[t·K + k] · xscale[t·K/block + k/block]. W = E2M1 code × block scale (no per-tensor
// factor).
using Fp4DotRows = void (*)(const Fp4Layout& w, const int16_t* xq, const float* xscale, int64_t m, int64_t r0,
                            int64_t r1, float* y, int64_t ldy);
Fp4DotRows fp4_dot_rows(CpuIsa isa);

}  // namespace k3::cpu
