// MXFP4 weights on the CPU: E2M1 × E8M0 scale per 32, on the shared E2M1 kernels
// (backend/cpu/kernels/fp4_matrix.h); activations 16-bit fixed point per block (weight-only).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/cpu/kernels/weight_matrix.h"

namespace k3::cpu {

// E2M1 codes [rows, cols/2] with E8M0 scales [rows, cols/32]; output_scale() = 1.
std::unique_ptr<WeightMatrix> make_mxfp4_matrix(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                                int64_t rows, int64_t cols, CpuIsa isa);

}  // namespace k3::cpu
