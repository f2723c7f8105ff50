// FP8 E4M3 weights with float multipliers: per tensor (ModelOpt FP8) or per block_n×block_k tile
// (ModelOpt FP8_PB_WO, DeepSeek `weight_scale_inv`, compressed-tensors FP8-block). In every one of
// these formats the stored scale is a dequant MULTIPLIER: w = e4m3(q) · scale (spec §2.4).
#pragma once

#include <cstdint>

namespace k3 {

// out[n][k] = e4m3(q[n][k]) · scale[n / block_n][k / block_k], scale row-major
// [cdiv(N, block_n), cdiv(K, block_k)] (ModelOpt's 4-D [N/128, 1, K/128, 1] has the same layout).
void dequant_fp8_block(const uint8_t* q, const float* scale, int64_t n, int64_t k, int64_t block_n, int64_t block_k,
                       float* out);

// Producer rule (ModelOpt / DeepSeek): per tile scale = amax/448 (an all-zero tile gets 1), codes =
// e4m3 RNE (saturating) of w / scale. Writes q [N, K] and scale [cdiv(N,bn), cdiv(K,bk)].
void quantize_fp8_block(const float* w, int64_t n, int64_t k, int64_t block_n, int64_t block_k, uint8_t* q,
                        float* scale);

}  // namespace k3
