// NVFP4 as ModelOpt stores it (spec §2.3): E2M1 codes two per byte along K (element 2i in the low
// nibble), an E4M3 block scale per 16 elements of K, and an F32 per-tensor weight_scale_2:
// w[n][k] = E2M1(code) · e4m3(weight_scale[n][k/16]) · weight_scale_2.
#pragma once

#include <cstdint>

namespace k3 {

inline constexpr int64_t kNvfp4Group = 16;

// packed [N, K/2], block_scales (E4M3) [N, K/16]; K % 16 == 0.
void dequant_nvfp4(const uint8_t* packed, const uint8_t* block_scales, float global_scale, int64_t n, int64_t k,
                   float* out);

// ModelOpt's rule for a tensor whose weight_scale_2 is already chosen (w1/w3 share one):
// block scale s_b = amax_b / (6 · weight_scale_2) in E4M3 (zero blocks 1.0, clamped below at 2^-9),
// codes = E2M1 RNE of w / (e4m3(s_b) · weight_scale_2).
void quantize_nvfp4(const float* w, int64_t n, int64_t k, float global_scale, uint8_t* packed, uint8_t* block_scales);

// ModelOpt's weight_scale_2 for a tensor (or a group of tensors sharing it) with this amax.
inline float nvfp4_global_scale(float amax) { return amax > 0.0f ? amax / (6.0f * 448.0f) : 1.0f; }

}  // namespace k3
