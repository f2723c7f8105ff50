// Scalar tier of the FP4 row-group kernel and the tier dispatch.
#define K3_TIER scalar
#include "backend/cpu/kernels/fp4_dot_impl.h"

namespace k3::cpu {

Fp4DotRows fp4_dot_rows_avx2_tier();
Fp4DotRows fp4_dot_rows_avx512_tier();

float fp4_scale_value(Fp4ScaleCode code, uint8_t byte) {
  return code == Fp4ScaleCode::E4m3 ? decode_e4m3fn(byte) : kUE8M0Values[byte];
}

Fp4DotRows fp4_dot_rows(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx512: return fp4_dot_rows_avx512_tier();
    case CpuIsa::Avx2: return fp4_dot_rows_avx2_tier();
    case CpuIsa::Scalar: break;
  }
  return scalar::fp4_dot_rows;
}

}  // namespace k3::cpu
