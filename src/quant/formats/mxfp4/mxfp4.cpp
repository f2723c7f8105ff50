#include "quant/formats/mxfp4/mxfp4.h"

#include <algorithm>
#include <cmath>

#include "core/numeric.h"

namespace k3 {

void dequant_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t n, int64_t k, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t byte = packed[r * (k / 2) + c / 2];
      const uint8_t code = (c & 1) ? (byte >> 4) : (byte & 0xF);
      out[r * k + c] = decode_e2m1(code) * decode_ue8m0(scales[r * (k / kMxfp4Group) + c / kMxfp4Group]);
    }
  }
}

void quantize_mxfp4(const float* w, int64_t n, int64_t k, uint8_t* packed, uint8_t* scales) {
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < k / kMxfp4Group; ++g) {
      const float* x = w + r * k + g * kMxfp4Group;
      float amax = 0.0f;
      for (int64_t i = 0; i < kMxfp4Group; ++i) amax = std::max(amax, std::fabs(x[i]));
      int exponent = -127;
      if (amax > 0.0f) exponent = std::clamp(static_cast<int>(std::floor(std::log2(amax))) - 2, -127, 127);
      scales[r * (k / kMxfp4Group) + g] = static_cast<uint8_t>(exponent + 127);
      const float inv = std::ldexp(1.0f, -exponent);
      for (int64_t i = 0; i < kMxfp4Group; i += 2) {
        const uint8_t lo = encode_e2m1(x[i] * inv), hi = encode_e2m1(x[i + 1] * inv);
        packed[r * (k / 2) + (g * kMxfp4Group + i) / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

}  // namespace k3
