// AVX2 tier of the FP4 row-group kernel: the portable body, vectorised by the compiler.
#define K3_TIER avx2
#include "backend/cpu/kernels/fp4_dot_impl.h"

namespace k3::cpu {
Fp4DotRows fp4_dot_rows_avx2_tier() { return avx2::fp4_dot_rows; }
}  // namespace k3::cpu
