// AVX2 tier of the integer row-group kernel: the portable body, vectorised by the compiler.
#define K3_TIER avx2
#include "quant/formats/modelslim/cpu/int8_dot_impl.h"

namespace k3::cpu {
Int8DotRows int8_dot_rows_avx2_tier() { return avx2::int8_dot_rows; }
}  // namespace k3::cpu
