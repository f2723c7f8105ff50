#include "quant/formats/mxfp4/cpu/mxfp4_matrix.h"

#include "backend/cpu/kernels/fp4_matrix.h"

namespace k3::cpu {

std::unique_ptr<WeightMatrix> make_mxfp4_matrix(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                                int64_t rows, int64_t cols, CpuIsa isa) {
  return make_fp4_matrix(packed, scales, Fp4Format{.name = "mxfp4", .scale_code = Fp4ScaleCode::E8m0, .block = 32}, 1.0f,
                         rows, cols, isa);
}

}  // namespace k3::cpu
