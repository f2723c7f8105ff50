// The CPU form of a ModelSlim W4A8 / W8A8 binding (int8_matrix.cpp's formats), read from the
// binding's parts exactly as dequant_modelslim_binding reads them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/cpu/kernels/weight_matrix.h"
#include "quant/plan/materialize.h"

namespace k3::cpu {

// ModelSlim W4A8 (quant-formats §4.3): int4 codes q ∈ [-8, 7], two per byte along N ([rows/2,
// cols], packed_along_n, modelslim.h's nibble order) or one per byte ([rows, cols]; a code outside
// [-8, 7] is an error); w = q · scale[n] (· scale_second[n][k / group_size] when group_size > 0,
// a multiple of 16). Activations int8, dynamic per token. Repacked at load into int8_dot.h's layout.
std::unique_ptr<WeightMatrix> make_w4a8_matrix(std::span<const int8_t> weight, bool packed_along_n, std::vector<float> scale,
                                               std::vector<float> scale_second, int64_t group_size, int64_t rows,
                                               int64_t cols, CpuIsa isa);
// ModelSlim W8A8 (§4.2): codes [rows, cols], w = (q − offset[n]) · scale[n] (integer offsets).
// Activations int8: dynamic per token, or static: code = clamp(round(x / scale) + offset, -128, 127)
// with the values (code − offset) · scale (prepare_int8_static).
struct W8A8StaticInput {
  float scale = 1.0f;  // input_scale
  int32_t offset = 0;  // input_offset
};
std::unique_ptr<WeightMatrix> make_w8a8_matrix(std::span<const int8_t> weight, std::vector<float> scale,
                                               std::vector<float> offset, std::optional<W8A8StaticInput> static_input,
                                               int64_t rows, int64_t cols, CpuIsa isa);

// Expert `expert` of a bank (or the only tensor: expert < 0) of a W4A8 / W8A8 binding as a
// WeightMatrix [rows, cols]. W8A8 static: the activations follow input_scale / input_offset, and
// the checkpoint's quant_bias and deq_scale must be the ones the weight implies (quant_bias =
// −input_offset·Σ_k q, deq_scale = input_scale·weight_scale within bf16 rounding); the kernel uses
// the weight reference, so the fused and many-token paths agree. Bad shapes, dtypes or values
// are a k3::Error naming the tensor and field.
std::unique_ptr<WeightMatrix> make_modelslim_matrix(const Binding& b, int64_t rows, int64_t cols, PlanFiles& files,
                                                    int64_t expert, CpuIsa isa);

}  // namespace k3::cpu
