// Scalar tier of the integer row-group kernel and the tier dispatch.
#define K3_TIER scalar
#include "quant/formats/modelslim/cpu/int8_dot_impl.h"

namespace k3::cpu {

Int8DotRows int8_dot_rows_avx2_tier();
Int8DotRows int8_dot_rows_avx512_tier();

Int8DotRows int8_dot_rows(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx512: return int8_dot_rows_avx512_tier();
    case CpuIsa::Avx2: return int8_dot_rows_avx2_tier();
    case CpuIsa::Scalar: break;
  }
  return scalar::int8_dot_rows;
}

}  // namespace k3::cpu
