// Portable body of gemm_rows_f32, compiled once per tier without hand-written kernels
// (tile_gemm.cpp, tile_gemm_avx2.cpp) so the compiler vectorises it for that tier's registers.
// 4 rows × 4 tokens per register block; tokens are the outer loop, so a block's activation rows
// stay in cache while the tile's rows pass over them.
#pragma once

#include <cstdint>

namespace k3::cpu::K3_TIER {

inline void gemm_rows_f32(const float* w, int64_t rows, const float* x, int64_t m, int64_t k, float* y, int64_t ldy) {
  constexpr int64_t R = 4, T = 4;
  for (int64_t t0 = 0; t0 < m; t0 += T) {
    const int64_t nt = m - t0 < T ? m - t0 : T;
    for (int64_t r0 = 0; r0 < rows; r0 += R) {
      const int64_t nr = rows - r0 < R ? rows - r0 : R;
      if (nr == R && nt == T) {
        const float *w0 = w + r0 * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;
        const float *x0 = x + t0 * k, *x1 = x0 + k, *x2 = x1 + k, *x3 = x2 + k;
        float a00 = 0, a01 = 0, a02 = 0, a03 = 0, a10 = 0, a11 = 0, a12 = 0, a13 = 0;
        float a20 = 0, a21 = 0, a22 = 0, a23 = 0, a30 = 0, a31 = 0, a32 = 0, a33 = 0;
#pragma omp simd reduction(+ : a00, a01, a02, a03, a10, a11, a12, a13, a20, a21, a22, a23, a30, a31, a32, a33)
        for (int64_t i = 0; i < k; ++i) {
          a00 += w0[i] * x0[i], a01 += w0[i] * x1[i], a02 += w0[i] * x2[i], a03 += w0[i] * x3[i];
          a10 += w1[i] * x0[i], a11 += w1[i] * x1[i], a12 += w1[i] * x2[i], a13 += w1[i] * x3[i];
          a20 += w2[i] * x0[i], a21 += w2[i] * x1[i], a22 += w2[i] * x2[i], a23 += w2[i] * x3[i];
          a30 += w3[i] * x0[i], a31 += w3[i] * x1[i], a32 += w3[i] * x2[i], a33 += w3[i] * x3[i];
        }
        const float acc[R][T] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23}, {a30, a31, a32, a33}};
        for (int64_t r = 0; r < R; ++r) {
          for (int64_t t = 0; t < T; ++t) y[(t0 + t) * ldy + r0 + r] = acc[r][t];
        }
        continue;
      }
      for (int64_t r = 0; r < nr; ++r) {
        for (int64_t t = 0; t < nt; ++t) {
          const float* wr = w + (r0 + r) * k;
          const float* xt = x + (t0 + t) * k;
          float acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t i = 0; i < k; ++i) acc += wr[i] * xt[i];
          y[(t0 + t) * ldy + r0 + r] = acc;
        }
      }
    }
  }
}

}  // namespace k3::cpu::K3_TIER
