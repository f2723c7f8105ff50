#define K3_TIER scalar
#include "backend/cpu/kernels/tile_gemm.h"

#include "backend/cpu/kernels/tile_gemm_impl.h"

namespace k3::cpu {

void gemm_rows_f32_avx2(const float* w, int64_t rows, const float* x, int64_t m, int64_t k, float* y, int64_t ldy);
void gemm_rows_f32_avx512(const float* w, int64_t rows, const float* x, int64_t m, int64_t k, float* y, int64_t ldy);

void gemm_rows_f32(CpuIsa isa, const float* w, int64_t rows, const float* x, int64_t m, int64_t k, float* y,
                   int64_t ldy) {
  switch (isa) {
    case CpuIsa::Avx512: return gemm_rows_f32_avx512(w, rows, x, m, k, y, ldy);
    case CpuIsa::Avx2: return gemm_rows_f32_avx2(w, rows, x, m, k, y, ldy);
    case CpuIsa::Scalar: return scalar::gemm_rows_f32(w, rows, x, m, k, y, ldy);
  }
}

}  // namespace k3::cpu
