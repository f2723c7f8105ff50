// Between the host side of the W4A8 expert GEMM (moe_w4a8.cpp) and its kernels (moe_w4a8.cu).
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe/moe_tiles.h"

namespace k3::cuda::w4a8 {

struct GemmArgs {
  const int8_t* x;       // s8 [R, K]
  int64_t ldx;           // bytes
  const float* xscale;   // [R]
  const uint8_t* codes;
  const float* scales;
  const float* out_scale;
  void* y;               // bf16 or f32 [R, N]
  int64_t ldy;
  int n, k, group, part_rows, parts;
  const int32_t* offsets;
  const float* row_weight;  // [R] or null: each sorted row's output scaled by it (MoeDispatch::row_weight)
};

// Launches the kernel of `tile` (kM16 / kM64) over the tile map; grouped: K/group > 1.
void launch_gemm(MoeTile tile, bool f32_out, bool grouped, const GemmArgs& a, const MoeTileMap& map,
                 cudaStream_t stream);

}  // namespace k3::cuda::w4a8
