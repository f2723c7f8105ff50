// The CPU form of a ModelSlim W4A8 / W8A8 binding (int8_matrix.cpp's formats), read from the
// binding's parts exactly as dequant_modelslim_binding reads them.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cpu/kernels/weight_matrix.h"
#include "quant/plan/materialize.h"

namespace k3::cpu {

// Expert `expert` of a bank (or the only tensor: expert < 0) of a W4A8 / W8A8 binding as a
// WeightMatrix [rows, cols]. W8A8 static: the activations follow input_scale / input_offset, and
// the checkpoint's quant_bias and deq_scale must be the ones the weight implies (quant_bias =
// −input_offset·Σ_k q, deq_scale = input_scale·weight_scale within bf16 rounding); the kernel uses
// the weight reference, so the fused and many-token paths agree. Bad shapes, dtypes or values
// are a k3::Error naming the tensor and field.
std::unique_ptr<WeightMatrix> make_modelslim_matrix(const Binding& b, int64_t rows, int64_t cols, PlanFiles& files,
                                                    int64_t expert, CpuIsa isa);

}  // namespace k3::cpu
