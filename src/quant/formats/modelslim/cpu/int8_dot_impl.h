// Portable body of the integer row-group kernel (int8_dot.h), compiled once per tier that has no
// hand-written version (scalar, AVX2). Same exact integer block sums as the AVX-512 kernel.
#pragma once

#include "quant/formats/modelslim/cpu/int8_dot.h"

namespace k3::cpu::K3_TIER {

inline void int8_dot_rows(const Int8Layout& w, const int8_t* xq, const int32_t* xsums16, const float* xscale, int64_t m,
                          int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const int64_t lk = w.line_k(), lines = w.k / lk, blocks = w.k / w.block, lines_per_block = w.block / lk;
  for (int64_t g = r0 / kInt8GroupRows; g * kInt8GroupRows < r1; ++g) {
    const uint8_t* codes = w.codes + g * lines * kInt8LineBytes;
    const int32_t* offsets = w.offsets + g * kInt8GroupRows;
    for (int64_t t = 0; t < m; ++t) {
      const int8_t* x = xq + t * w.k;
      float acc[kInt8GroupRows] = {};
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t xsum = 0;
        for (int64_t j = b * w.block / 16; j < (b + 1) * w.block / 16; ++j) xsum += xsums16[t * w.k / 16 + j];
        const int32_t* terms = w.row_terms ? w.row_terms + (g * blocks + b) * kInt8GroupRows : nullptr;
        int32_t part[kInt8GroupRows];
        for (int64_t i = 0; i < kInt8GroupRows; ++i) part[i] = -offsets[i] * xsum - (terms ? terms[i] : 0);
        for (int64_t o = b * lines_per_block; o < (b + 1) * lines_per_block; ++o) {
          const uint8_t* line = codes + o * kInt8LineBytes;
          for (int64_t j = 0; j < lk; ++j) {
            const int32_t xv = x[o * lk + j];
            const int shift = j < 4 ? 0 : 4;
            for (int64_t i = 0; i < kInt8GroupRows; ++i) {
              const uint8_t byte = line[4 * i + j % 4];
              part[i] += (w.int4 ? (byte >> shift) & 0xF : byte) * xv;
            }
          }
        }
        const float* scale = w.scales + (g * w.scale_blocks + b * w.scale_blocks / blocks) * kInt8GroupRows;
        for (int64_t i = 0; i < kInt8GroupRows; ++i) acc[i] += static_cast<float>(part[i]) * scale[i];
      }
      for (int64_t i = 0; i < kInt8GroupRows; ++i) {
        const int64_t r = g * kInt8GroupRows + i;
        if (r >= r0 && r < r1) y[t * ldy + r] = acc[i] * xscale[t];
      }
    }
  }
}

}  // namespace k3::cpu::K3_TIER
