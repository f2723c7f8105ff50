// The kernel variants behind attn_res_mix_norm and moe_route (ops.h), for their kernels, the tests
// and the benchmarks; everything else calls the ops.h entry points, which choose from the shapes.
// Host-only header.
#pragma once

#include "backend/cuda/ops/ops.h"

namespace k3::cuda {

// kOnePass reads each candidate once (online softmax; rows up to 8192, wider rows fall back to
// kTwoPass), kTwoPass reads them twice (the second time mostly from L2). attn_res_mix_norm takes
// kOnePass, the faster on the H200 (docs/cuda-backend.md).
enum class AttnResAlgo { kOnePass, kTwoPass };
void attn_res_mix_norm(std::span<const DeviceTensor> candidates, const float* c, const float* norm_w, float eps,
                       const DeviceTensor& y, cudaStream_t stream, AttnResAlgo algo);

// kAuto: one warp per token when there is no group restriction and E <= 1024, else one CTA per
// token (moe_route's choice); kBlock / kWarp force one (kWarp throws where it does not apply).
enum class RouterKernel { kAuto, kBlock, kWarp };
void moe_route(const RouterParams& p, const DeviceTensor& logits, const float* bias, const DeviceTensor& ids,
               const DeviceTensor& weights, cudaStream_t stream, RouterKernel kernel);

}  // namespace k3::cuda
