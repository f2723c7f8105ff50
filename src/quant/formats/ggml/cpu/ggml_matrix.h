// GGML block weights on the CPU (WeightMatrix of backend/cpu/kernels/weight_matrix.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/cpu/kernels/weight_matrix.h"
#include "io/ggml_types.h"

namespace k3::cpu {

// GGML blocks of `type`, rows of the native layout read in place (GGUF / ExpertPack experts are
// never copied); activations quantised as ggml's vec_dot_type of that type.
std::unique_ptr<WeightMatrix> make_ggml_matrix(GgmlType type, std::span<const uint8_t> blocks, int64_t rows,
                                               int64_t cols, KeepAlive keep_alive, CpuIsa isa);

}  // namespace k3::cpu
