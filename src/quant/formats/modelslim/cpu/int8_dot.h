// Integer weights (ModelSlim int4 / int8) in the CPU's 16-row interleaved layout, times int8
// activation codes (ActivationForm::Int8PerToken). Repacked once at load (int8_matrix.cpp) so that
// one 64-byte line holds 16 rows and a 32-bit vector lane is a row (vpdpbusd sums 4 k per lane):
//   int8: line o, bytes 4i..4i+3 = row i at k = 4o..4o+3, stored q + 128 (u8);
//   int4: line o, bytes 4i..4i+3 = row i at k = 8o..8o+3 (low nibbles) and 8o+4..8o+7 (high
//         nibbles), stored q + 8 (u4).
// Weights are unsigned so that u8 × s8 products apply; the stored offset (and any weight zero
// point) is removed per block with the activation sums, so every block sum is the exact integer
// Σ (c − z)(q − off). Rows past N have zero codes and zero scales.
#pragma once

#include <cstdint>

#include "backend/cpu/kernels/cpu_isa.h"

namespace k3::cpu {

inline constexpr int64_t kInt8GroupRows = 16, kInt8LineBytes = 64;

struct Int8Layout {
  const uint8_t* codes = nullptr;       // [groups][K / line_k][64]
  const float* scales = nullptr;        // [groups][scale_blocks][16]: weight scale of each row per
                                        // K / scale_blocks columns (integer block b uses scale
                                        // b · scale_blocks / (K / block))
  const int32_t* offsets = nullptr;     // [groups][16]: the stored code of q = 0, plus the row's
                                        // weight zero point (int4: 8; int8: 128 + weight_offset)
  const int32_t* row_terms = nullptr;   // [groups][K / block][16] or null: z · Σ_{k∈b} (q − off),
                                        // the activation zero point's term (static W8A8)
  int64_t k = 0;             // columns (multiple of block)
  int64_t block = 0;         // k per integer block (multiple of 16; small enough for int32 sums)
  int64_t scale_blocks = 0;  // scale groups along K (a divisor of K / block)
  bool int4 = false;
  int64_t line_k() const { return int4 ? 8 : 4; }
};

// y[t·ldy + r] = xscale[t] · Σ_b scale_b[r] · Σ_{k∈b} (c_t[k] − z)(q[r][k] − off[r]) for rows
// r0 ≤ r < r1 (r0 a multiple of 16), tokens t < m; c_t = xq[t·K ..], xsums16[t·K/16 + j] = Σ of
// c_t over k ∈ [16j, 16j + 16).
using Int8DotRows = void (*)(const Int8Layout& w, const int8_t* xq, const int32_t* xsums16, const float* xscale,
                             int64_t m, int64_t r0, int64_t r1, float* y, int64_t ldy);
Int8DotRows int8_dot_rows(CpuIsa isa);

}  // namespace k3::cpu
