// Between the host side of the GGUF expert kernels (moe_ggml.cu: moe_grouped_gemm_ggml) and the
// per-type translation units of the tensor-core prefill kernel (moe_ggml_mma_<type>.cu, over
// moe_ggml_mma.cuh). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe/moe_tiles.h"
#include "io/ggml_types.h"

namespace k3::cuda::ggml_mma {

struct Args {
  const void* x;  // bf16 [R, K]
  int64_t ldx;
  const uint8_t* w;  // the bank's GGML rows, row_bytes apart
  int64_t row_bytes;
  void* y;  // bf16 or f32 [R, N]
  int64_t ldy;
  int n, k;
  const int32_t* offsets;
  const float* row_weight;  // MoeDispatch::row_weight
};

// The grouped GEMM of tile class kM64 or kM128 over the bank of type T.
template <GgmlType T>
void launch(MoeTile tile, bool f32_out, const Args& a, const MoeTileMap& map, cudaStream_t stream);

extern template void launch<GgmlType::Q4_0>(MoeTile, bool, const Args&, const MoeTileMap&, cudaStream_t);
extern template void launch<GgmlType::Q8_0>(MoeTile, bool, const Args&, const MoeTileMap&, cudaStream_t);
extern template void launch<GgmlType::Q2_K>(MoeTile, bool, const Args&, const MoeTileMap&, cudaStream_t);
extern template void launch<GgmlType::Q3_K>(MoeTile, bool, const Args&, const MoeTileMap&, cudaStream_t);
extern template void launch<GgmlType::Q4_K>(MoeTile, bool, const Args&, const MoeTileMap&, cudaStream_t);
extern template void launch<GgmlType::Q5_K>(MoeTile, bool, const Args&, const MoeTileMap&, cudaStream_t);
extern template void launch<GgmlType::Q6_K>(MoeTile, bool, const Args&, const MoeTileMap&, cudaStream_t);

}  // namespace k3::cuda::ggml_mma
