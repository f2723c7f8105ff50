#define K3_TIER avx512
#include "backend/cpu/kernels/tile_gemm_impl.h"

namespace k3::cpu {
void gemm_rows_f32_avx512(const float* w, int64_t rows, const float* x, int64_t m, int64_t k, float* y, int64_t ldy) {
  avx512::gemm_rows_f32(w, rows, x, m, k, y, ldy);
}
}  // namespace k3::cpu
