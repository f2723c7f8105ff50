// 4-bit E2M1 weights with one block-scale byte per `block` columns (WeightMatrix of
// weight_matrix.h), repacked at load into fp4_dot.h's layout. The formats built on it choose the
// block-scale encoding, the block length, the per-tensor factor and an optional activation contract.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/cpu/kernels/fp4_dot.h"
#include "backend/cpu/kernels/weight_matrix.h"

namespace k3::cpu {

// One token's k activation values as an activation contract quantises them (the values the kernel
// multiplies with, its per-tensor factor `scale` left out); they must be exact in 16-bit fixed point
// per weight block.
using Fp4ActivationValues = void (*)(const float* x, int64_t k, float scale, float* out);

struct Fp4Format {
  const char* name = "fp4";                // kernel_name() prefix; "<name> weight" in errors
  Fp4ScaleCode scale_code = Fp4ScaleCode::E4m3;
  int64_t block = 16;                      // columns per scale byte (a multiple of 8)
  // The activation contract (null: weight-only; activations in 16-bit fixed point per block). Its
  // `activation_scale` joins output_scale; `contract` tags kernel_name().
  Fp4ActivationValues activation_values = nullptr;
  float activation_scale = 1.0f;
  const char* contract = "";
};

// E2M1 codes two per byte along K (element 2i in the low nibble) [rows, cols/2] with one scale byte
// per `format.block` columns [rows, cols/block]; W = code × block scale, output_scale() =
// output_scale (× activation_scale under an activation contract).
std::unique_ptr<WeightMatrix> make_fp4_matrix(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                              const Fp4Format& format, float output_scale, int64_t rows, int64_t cols,
                                              CpuIsa isa);

}  // namespace k3::cpu
