#include "quant/formats/nvfp4/cpu/nvfp4_matrix.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels/fp4_matrix.h"
#include "core/numeric.h"

namespace k3::cpu {

// The checkpoint's NVFP4 activation quantisation (quant-formats §2.3) of one token: code ·
// block_scale with the static input_scale left out (it joins the output scale). Per 16 values these
// share one block scale, so Fixed16 holds them exactly (2·E2M1 fits 16 bits at any block scale).
void nvfp4_activation_values(const float* x, int64_t k, float input_scale, float* out) {
  const float gs = 1.0f / input_scale;
  for (int64_t b = 0; b < k; b += 16) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + 16; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float sf = decode_e4m3fn(encode_e4m3fn_sat(amax / 6.0f * gs));
    for (int64_t i = b; i < b + 16; ++i) out[i] = sf > 0.0f ? decode_e2m1(encode_e2m1(x[i] * gs / sf)) * sf : 0.0f;
  }
}

std::unique_ptr<WeightMatrix> make_nvfp4_matrix(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                                float global, int64_t rows, int64_t cols, CpuIsa isa,
                                                const Nvfp4Options& options) {
  Fp4Format format{.name = "nvfp4", .scale_code = Fp4ScaleCode::E4m3, .block = 16};
  if (options.w4a4) {
    format.activation_values = nvfp4_activation_values;
    format.activation_scale = options.input_scale;
    format.contract = "w4a4";
  }
  return make_fp4_matrix(packed, scales, format, global, rows, cols, isa);
}

}  // namespace k3::cpu
