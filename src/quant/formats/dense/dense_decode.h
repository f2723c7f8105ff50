// Decoding of unquantized safetensors payloads to float32: the "dense" scheme's exact reference.
#pragma once

#include <cstdint>
#include <span>

#include "io/safetensors.h"

namespace k3 {

// True for dtypes that have an elementwise float value: BOOL, U8/I8/I16/U16/I32/U32/I64/U64,
// F16, BF16, F32, F64, F8_E4M3, F8_E5M2, F8_E8M0, F4 (E2M1, two per byte, low nibble first).
bool dense_dtype_decodable(Dtype dtype);

// Decodes `n` elements stored in `bytes` into out[0..n). Integers convert exactly when they fit a
// float's 24-bit mantissa and round to nearest otherwise. Throws k3::Error (naming `where`) for a
// dtype without an elementwise value or a byte count that does not match n.
void decode_dense(Dtype dtype, std::span<const uint8_t> bytes, float* out, uint64_t n, const Where& where);

}  // namespace k3
