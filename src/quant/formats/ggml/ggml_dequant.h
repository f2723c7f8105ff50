// Exact GGML dequantizers: the float results are bit-identical to ggml's to_float (reference,
// non-repacked) for the same bytes, -0.0 included. Each block function performs the same float
// operations in the same order as ggml. (For these formats every product ahead of an addition is
// exact, so FMA contraction could not change a bit; the file is built with -ffp-contract=off
// anyway so that this stays true for formats added later.)
#pragma once

#include <cstdint>
#include <span>

#include "io/ggml_types.h"

namespace k3 {

// True for the types dequantize_row handles: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4.
bool ggml_has_dequant(GgmlType type);

// Dequantizes n elements (a whole number of blocks) stored contiguously at src
// (n / block_size * type_size bytes) into dst. Throws k3::Error for an unsupported type or an n
// that is negative or not a multiple of the block size.
void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n);

// Dequantizes a whole tensor of n elements with OpenMP threads (n_threads <= 0: OpenMP's
// default). src.size() must be exactly the packed size of n elements.
void dequantize_tensor(GgmlType type, std::span<const uint8_t> src, float* dst, int64_t n, int n_threads = 0);

}  // namespace k3
