// FP8 E4M3 weights on the CPU: codes read in place × float multipliers per block_n×block_k tile, and
// the checkpoint's FP8 activation contract.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/kernels/weight_matrix.h"

namespace k3::cpu {

// The FP8 activation contract (what the GPU's FP8 GEMMs compute with), form F32 with the values
// e4m3(x / s) · s: s = static_scale (ModelOpt FP8 input_scale) when > 0, else per token and 1×128
// block the producer rule of quant/formats/fp8 quantize_fp8_block (s = amax/448, an all-zero block 1).
void prepare_fp8(const float* x, int64_t m, int64_t k, float static_scale, PreparedActivations& a);

// FP8 E4M3 codes [rows, cols] read in place × float multipliers per block_n×block_k tile, scale
// row-major [cdiv(rows, block_n), cdiv(cols, block_k)] (per tensor: block_n = rows, block_k = cols).
// Activations f32, or with `a8` the checkpoint's FP8 activation contract (prepare_fp8): static with
// input_scale > 0 (ModelOpt FP8), else dynamic per token and 1×128 block (FP8_PB_WO, DeepSeek).
struct Fp8Options {
  bool a8 = false;
  float input_scale = 0.0f;
};
std::unique_ptr<WeightMatrix> make_fp8_matrix(std::span<const uint8_t> codes, std::vector<float> scale, int64_t block_n,
                                              int64_t block_k, int64_t rows, int64_t cols, KeepAlive keep_alive,
                                              CpuIsa isa, const Fp8Options& options = {});

}  // namespace k3::cpu
