// MXFP4 as compressed-tensors packs it (the native Kimi-K3 release, spec arch §9.3): E2M1 codes,
// two per byte along K (element 2i in the low nibble), and one E8M0 exponent per 32 elements of K:
// w[n][k] = E2M1(code[n][k]) · 2^(scale[n][k/32] − 127).
#pragma once

#include <cstdint>

namespace k3 {

inline constexpr int64_t kMxfp4Group = 32;

// packed [N, K/2], scales [N, K/32]; K % 32 == 0.
void dequant_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t n, int64_t k, float* out);

// OCP MX rule: per group, shared exponent = floor(log2(amax)) − 2 (E2M1's emax), E8M0-coded and
// clamped; codes = E2M1 RNE (saturating at ±6) of w / 2^exponent. An all-zero group gets 2^-127.
void quantize_mxfp4(const float* w, int64_t n, int64_t k, uint8_t* packed, uint8_t* scales);

}  // namespace k3
