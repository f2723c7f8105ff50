// NVFP4 weights on the CPU: E2M1 × E4M3 scale per 16 × the global weight_scale_2, on the shared E2M1
// kernels (backend/cpu/kernels/fp4_matrix.h), and the checkpoint's W4A4 activation contract.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/cpu/kernels/weight_matrix.h"

namespace k3::cpu {

// The W4A4 activation values of one token of k values (k % 16 == 0): per 16, sf = e4m3(amax / 6 /
// input_scale) and out = e2m1(x / input_scale / sf) · sf — the code times its block scale, with the
// static input_scale left out (it joins the output scale). The CUDA backend's NVFP4 activation
// quantisation is tested against this, bit for bit.
void nvfp4_activation_values(const float* x, int64_t k, float input_scale, float* out);

// Activations: 16-bit fixed point per block (weight-only, default) or, with w4a4, the checkpoint's
// NVFP4 activation contract: x quantised per 16 with the static input_scale as global factor (spec
// §2.3), the input_scale then joining output_scale.
struct Nvfp4Options {
  bool w4a4 = false;
  float input_scale = 1.0f;
};
// E2M1 codes [rows, cols/2] with E4M3 scales [rows, cols/16]; output_scale() = global
// (weight_scale_2), × input_scale under W4A4.
std::unique_ptr<WeightMatrix> make_nvfp4_matrix(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                                float global, int64_t rows, int64_t cols, CpuIsa isa,
                                                const Nvfp4Options& options = {});

}  // namespace k3::cpu
