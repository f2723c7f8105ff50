// The NVFP4 W4A4 activation contract on the GPU (k3-quant-formats §2.3; an option): the
// sorted rows of a MoE dispatch quantised per 16 values with their expert's static input_scale, as
// the checkpoint's producers compute them for FP4 tensor cores. Hopper has none, so the values are
// formed exactly and the W4A16 kernels (moe_w4.h) multiply them:
//   sf = e4m3(amax₁₆ / 6 / input_scale[e]),  out = e2m1(x / input_scale[e] / sf) · sf
// (RNE, saturating; the CPU's cpu::nvfp4_activation_values, bit for bit). code · sf has at most 6
// significant bits inside bf16's exponent range, so a bf16 output is exact; the static input_scale is
// left out of the values and belongs in the GEMM's per-expert out_scale (as the CPU folds it into its
// output scale). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/moe/moe.h"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

// out[r] = the values above for every sorted row r < expert_offsets[E] of `d`, with e = the expert
// owning r; input_scale: device f32 [E]. xs: bf16 or f32 [R, K], out: bf16 [R, K]; K % 16 == 0,
// 16-byte aligned rows. Rows past the dispatch's last expert are left alone. Graph-capturable.
void moe_quantize_nvfp4_rows(const DeviceTensor& xs, const float* input_scale, const MoeDispatch& d,
                             const DeviceTensor& out, cudaStream_t stream);
// GEMM 2's input in one pass: the same values of act(gate, up) rounded to bf16 (ops.h's
// gated_activation; gate, up bf16 [R, K], e.g. the halves of GEMM 1's output) — bit for bit
// gated_activation into bf16 followed by moe_quantize_nvfp4_rows, without the bf16 rows in memory.
void moe_quantize_nvfp4_activation(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                                   const float* input_scale, const MoeDispatch& d, const DeviceTensor& out,
                                   cudaStream_t stream);

}  // namespace k3::cuda
