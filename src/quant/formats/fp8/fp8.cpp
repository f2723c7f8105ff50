#include "quant/formats/fp8/fp8.h"

#include <algorithm>
#include <cmath>

#include "core/numeric.h"

namespace k3 {

void dequant_fp8_block(const uint8_t* q, const float* scale, int64_t n, int64_t k, int64_t block_n, int64_t block_k,
                       float* out) {
  const int64_t kb = (k + block_k - 1) / block_k;
  for (int64_t r = 0; r < n; ++r) {
    const float* srow = scale + (r / block_n) * kb;
    for (int64_t b = 0; b < kb; ++b) {
      const int64_t c1 = std::min(k, (b + 1) * block_k);
      for (int64_t c = b * block_k; c < c1; ++c) out[r * k + c] = decode_e4m3fn(q[r * k + c]) * srow[b];
    }
  }
}

void quantize_fp8_block(const float* w, int64_t n, int64_t k, int64_t block_n, int64_t block_k, uint8_t* q,
                        float* scale) {
  const int64_t nb = (n + block_n - 1) / block_n, kb = (k + block_k - 1) / block_k;
  for (int64_t bi = 0; bi < nb; ++bi) {
    for (int64_t bj = 0; bj < kb; ++bj) {
      const int64_t r0 = bi * block_n, r1 = std::min(n, r0 + block_n), c0 = bj * block_k, c1 = std::min(k, c0 + block_k);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * k + c]));
      }
      const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
      scale[bi * kb + bj] = s;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) q[r * k + c] = encode_e4m3fn_sat(w[r * k + c] / s);
      }
    }
  }
}

}  // namespace k3
