// The absorbed MLA decode's two products over a split GGUF kv_b (mla_absorb_ggml.cu). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/core/tensor.h"
#include "quant/formats/ggml/cuda/moe_ggml.h"

namespace k3::cuda {

// mla_absorb_q / mla_unabsorb_o (backend/cuda/attention/mla/mla.h) over a split GGUF kv_b kept in
// its GGML blocks (ExpertPack checkpoints, k3-quant-formats §5.5): k_b [H, 512, 128] (Q4_0 in the checkpoints; bank rows
// h·512 + c, contracted over the 128 nope dims) and v_b [H, 128, 512] (Q2_K; rows h·128 + e, over the
// 512 latent columns), each a MoeGgmlBank with one "expert" per head. Weights are ggml's exact float
// dequantisation, activations are not quantised (the CPU's contract for this scheme); same q / q_abs /
// o_lat / gate / out forms as mla.h's.
void mla_absorb_q_ggml(const DeviceTensor& q, const MoeGgmlBank& k_b, const DeviceTensor& q_abs, cudaStream_t stream);
void mla_unabsorb_o_ggml(const DeviceTensor& o_lat, const MoeGgmlBank& v_b, const DeviceTensor& gate,
                         const DeviceTensor& out, cudaStream_t stream);

}  // namespace k3::cuda
