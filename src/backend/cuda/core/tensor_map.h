// TMA tensor maps (Hopper): the descriptor a kernel passes to cp.async.bulk.tensor (bulk_copy.cuh)
// to copy a 2-D box of a row-major tensor into shared memory. Encoded on the host through the
// driver's cuTensorMapEncodeTiled (reached through the runtime, no libcuda link); host-only header.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

// A map of the bf16 matrix t ([rows, cols], row stride t.ld elements, 16-byte aligned) in boxes of
// box_rows × box_cols elements with the 128-byte swizzle (box_cols · 2 == 128). Out-of-range parts
// of a box read as zeros. Throws (naming `what`) when the driver refuses the shape.
CUtensorMap tensor_map_bf16_sw128(const DeviceTensor& t, int box_rows, int box_cols, const char* what);

// A map of a 3-D array of 32-bit words without swizzle: dims[0] words innermost (contiguous),
// dims[1] at stride_bytes[0], dims[2] at stride_bytes[1] (multiples of 16); boxes of box[0..2]
// words (box[0]·4 a multiple of 16, each box dimension ≤ 256). Out-of-range parts read as zeros.
CUtensorMap tensor_map_u32_3d(const void* base, const int64_t (&dims)[3], const int64_t (&stride_bytes)[2],
                              const int (&box)[3], const char* what);

}  // namespace k3::cuda
