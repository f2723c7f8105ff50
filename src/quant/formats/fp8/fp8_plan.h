// The FP8 schemes in the load plan: F8_E4M3 weights with a per-tensor or per-tile multiplier.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/plan/plan_format.h"

namespace k3 {

// F8_E4M3 `weight` × one F32 multiplier (ModelOpt FP8).
Scheme fp8_tensor_scheme();
// Its parts for a weight [n, k]: `weight` F8_E4M3 [n, k], `weight_scale` F32 [] and the
// activation's `input_scale` F32 [].
std::vector<PartLayout> fp8_tensor_parts(uint64_t n, uint64_t k);
// F8_E4M3 `weight` × one multiplier per block_n × block_k tile.
Scheme fp8_block_scheme(uint32_t block_n, uint32_t block_k);
// A block-FP8 Linear: F8_E4M3 `weight` [N, K] + float multiplier `<scale_suffix>`
// [cdiv(N, block_n), cdiv(K, block_k)] (F32, BF16 or F16).
QuantizedLayout fp8_block_layout(uint32_t block_n, uint32_t block_k, const std::string& scale_suffix);

}  // namespace k3
