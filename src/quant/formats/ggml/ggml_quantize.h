// GGML block quantizers for the types k3 writes (make-tiny / quantize GGUF and ExpertPack checkpoints).
// They follow the structure of ggml's reference quantizers (absmax scales for Q8_0/Q4_0/Q5_0; per
// sub-block scale (and min) fitted by least squares, then 4/6/8-bit quantized against a
// super-block fp16 scale for the K-quants) but are not bit-identical to ggml's: their output is
// only required to be valid blocks close to the input. What a block MEANS is defined by
// ggml_dequant.h alone; tests compare k3's dequant of these bytes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "io/ggml_types.h"

namespace k3 {

// True for the types quantize_row writes: F32, F16, BF16, Q4_0, Q5_0, Q8_0, Q2_K, Q3_K, Q4_K, Q6_K.
bool ggml_has_quantize(GgmlType type);

// Quantizes n values (a whole number of blocks of `type`) into dst, which receives exactly
// n / block_size * type_size bytes. Throws k3::Error for another type or a partial block.
void quantize_row(GgmlType type, const float* src, uint8_t* dst, int64_t n);

// A row-major tensor of rows of `row_length` values, quantized row by row (rows are contiguous
// blocks, so this equals quantize_row over the whole span).
std::vector<uint8_t> quantize_tensor(GgmlType type, std::span<const float> src, uint64_t row_length);

}  // namespace k3
