// Row movement and elementwise glue of the CUDA forward pass (rows.cu): gathers and scatters of
// whole rows with f32/bf16 conversion (embedding lookup, MLA cache append and gather, picking the
// logit rows) and the residual add. cols % 8 == 0 and 16-byte aligned rows, as ops.h.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

// For r < count: dst[dst_index ? dst_index[r] : r] = src[src_index ? src_index[r] : r] (device int32
// indices; nullptr = identity). src, dst: f32 or bf16 with the same cols.
void copy_rows(const DeviceTensor& src, const int32_t* src_index, const DeviceTensor& dst, const int32_t* dst_index,
               int64_t count, cudaStream_t stream);

// acc += x: acc f32, x f32 or bf16, same shape.
void add_rows(const DeviceTensor& acc, const DeviceTensor& x, cudaStream_t stream);

}  // namespace k3::cuda
