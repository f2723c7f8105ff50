// FP8 E4M3 activation quantisation on the GPU (fp8_quant.cu), in front of the FP8 GEMMs
// (backend/cuda/gemm/gemm.h). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

// Per-token 1×128 FP8 E4M3 quantisation of activations (the FP8_PB_WO GEMM's A side):
// for row m and K-block b: s = amax/448 (1 when the block is all zero), q = e4m3_satfinite_rne(x/s)
// — the producer rule of quant/formats/fp8 quantize_fp8_block with 1×128 tiles, bit for bit.
// x: f32 or bf16 [M, K]; q: e4m3 [Mq, K] with Mq >= M: rows M..Mq-1 are padding (zero codes, scale
// 1), since cuBLASLt's block-scaled GEMM wants Mq a multiple of 8 (gemm.h); scales: f32 in
// cuBLASLt's VEC128_32F layout, the token index contiguous: scales[b·Mq + m], cdiv(K,128)·Mq floats.
void quantize_fp8_1x128(const DeviceTensor& x, const DeviceTensor& q, float* scales, cudaStream_t stream);
// Static per-tensor quantisation (ModelOpt FP8 input_scale): q = e4m3_satfinite_rne(x / *scale),
// scale a device f32 scalar.
void quantize_fp8_tensor(const DeviceTensor& x, const float* scale, const DeviceTensor& q, cudaStream_t stream);

}  // namespace k3::cuda
