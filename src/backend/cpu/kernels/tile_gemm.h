// The many-token path of every weight format: rows decoded exactly to float32 once, multiplied
// with all tokens' activation values (PreparedActivations::values).
#pragma once

#include <cstdint>

#include "backend/cpu/kernels/cpu_isa.h"

namespace k3::cpu {

// y[t * ldy + r] = Σ_i w[r * k + i] · x[t * k + i] for r < rows, t < m.
void gemm_rows_f32(CpuIsa isa, const float* w, int64_t rows, const float* x, int64_t m, int64_t k, float* y,
                   int64_t ldy);

}  // namespace k3::cpu
