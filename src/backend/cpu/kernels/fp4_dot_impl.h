// Portable body of the FP4 row-group kernel (fp4_dot.h), compiled once per tier that has no
// hand-written version (scalar, AVX2).
#pragma once

#include "backend/cpu/kernels/fp4_dot.h"
#include "core/numeric.h"

namespace k3::cpu::K3_TIER {

inline void fp4_dot_rows(const Fp4Layout& w, const uint16_t* x_bf16, int64_t m, int64_t r0, int64_t r1, float* y,
                         int64_t ldy) {
  const int64_t lines = w.k / kFp4LineK, blocks = w.k / w.block, lines_per_block = w.block / kFp4LineK;
  for (int64_t g = r0 / kFp4GroupRows; g * kFp4GroupRows < r1; ++g) {
    const uint8_t* codes = w.codes + g * lines * kFp4LineBytes;
    const uint8_t* scales = w.scales + g * blocks * kFp4GroupRows;
    for (int64_t t = 0; t < m; ++t) {
      const uint16_t* x = x_bf16 + t * w.k;
      float acc[kFp4GroupRows] = {};
      for (int64_t b = 0; b < blocks; ++b) {
        float part[kFp4GroupRows] = {};
        for (int64_t o = b * lines_per_block; o < (b + 1) * lines_per_block; ++o) {
          const uint8_t* line = codes + o * kFp4LineBytes;
          for (int64_t j = 0; j < 4; ++j) {
            for (int64_t p = 0; p < 2; ++p) {
              const float xv = decode_bf16(x[o * kFp4LineK + 2 * j + p]);
              for (int64_t i = 0; i < kFp4GroupRows; ++i) {
                const uint8_t byte = line[2 * (2 * i + p) + j / 2];
                part[i] += kE2M1Values[(byte >> (4 * (j % 2))) & 0xF] * xv;
              }
            }
          }
        }
        for (int64_t i = 0; i < kFp4GroupRows; ++i) {
          acc[i] += part[i] * fp4_scale_value(w.scale_code, scales[b * kFp4GroupRows + i]);
        }
      }
      for (int64_t i = 0; i < kFp4GroupRows; ++i) {
        const int64_t r = g * kFp4GroupRows + i;
        if (r >= r0 && r < r1) y[t * ldy + r] = acc[i];
      }
    }
  }
}

}  // namespace k3::cpu::K3_TIER
