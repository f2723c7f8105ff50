#include "quant/formats/nvfp4/nvfp4.h"

#include <algorithm>
#include <cmath>

#include "core/numeric.h"

namespace k3 {

void dequant_nvfp4(const uint8_t* packed, const uint8_t* block_scales, float global_scale, int64_t n, int64_t k,
                   float* out) {
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t byte = packed[r * (k / 2) + c / 2];
      const uint8_t code = (c & 1) ? (byte >> 4) : (byte & 0xF);
      out[r * k + c] = decode_e2m1(code) * decode_e4m3fn(block_scales[r * (k / kNvfp4Group) + c / kNvfp4Group]) * global_scale;
    }
  }
}

void quantize_nvfp4(const float* w, int64_t n, int64_t k, float global_scale, uint8_t* packed, uint8_t* block_scales) {
  constexpr float kMinBlockScale = 1.0f / 512.0f;  // 2^-9, the smallest E4M3 subnormal
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < k / kNvfp4Group; ++g) {
      const float* x = w + r * k + g * kNvfp4Group;
      float amax = 0.0f;
      for (int64_t i = 0; i < kNvfp4Group; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float s = amax > 0.0f ? std::max(amax / (6.0f * global_scale), kMinBlockScale) : 1.0f;
      const uint8_t s_code = encode_e4m3fn_sat(s);
      block_scales[r * (k / kNvfp4Group) + g] = s_code;
      const float denom = decode_e4m3fn(s_code) * global_scale;
      for (int64_t i = 0; i < kNvfp4Group; i += 2) {
        const uint8_t lo = encode_e2m1(x[i] / denom), hi = encode_e2m1(x[i + 1] / denom);
        packed[r * (k / 2) + (g * kNvfp4Group + i) / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

}  // namespace k3
