// Portable body of the FP4 row-group kernel (fp4_dot.h), compiled once per tier that has no
// hand-written version (scalar, AVX2). Same integer block sums as the AVX-512 kernel.
#pragma once

#include "backend/cpu/kernels/fp4_dot.h"
#include "core/numeric.h"

namespace k3::cpu::K3_TIER {

inline void fp4_dot_rows(const Fp4Layout& w, const int16_t* xq, const float* xscale, int64_t m, int64_t r0, int64_t r1,
                         float* y, int64_t ldy) {
  static constexpr int32_t kTwiceE2M1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const int64_t lines = w.k / kFp4LineK, blocks = w.k / w.block, lines_per_block = w.block / kFp4LineK;
  for (int64_t g = r0 / kFp4GroupRows; g * kFp4GroupRows < r1; ++g) {
    const uint8_t* codes = w.codes + g * lines * kFp4LineBytes;
    const uint8_t* scales = w.scales + g * blocks * kFp4GroupRows;
    for (int64_t t = 0; t < m; ++t) {
      const int16_t* x = xq + t * w.k;
      float acc[kFp4GroupRows] = {};
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t part[kFp4GroupRows] = {};
        for (int64_t o = b * lines_per_block; o < (b + 1) * lines_per_block; ++o) {
          const uint8_t* line = codes + o * kFp4LineBytes;
          for (int64_t j = 0; j < 4; ++j) {
            for (int64_t p = 0; p < 2; ++p) {
              const int32_t xv = x[o * kFp4LineK + 2 * j + p];
              for (int64_t i = 0; i < kFp4GroupRows; ++i) {
                const uint8_t byte = line[2 * (2 * i + p) + j / 2];
                part[i] += kTwiceE2M1[(byte >> (4 * (j % 2))) & 0xF] * xv;
              }
            }
          }
        }
        const float xs = xscale[t * blocks + b] * 0.5f;
        for (int64_t i = 0; i < kFp4GroupRows; ++i) {
          acc[i] += static_cast<float>(part[i]) * (fp4_scale_value(w.scale_code, scales[b * kFp4GroupRows + i]) * xs);
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
