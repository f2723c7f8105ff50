// Between the host side of the 4-bit expert GEMMs (moe_w4.cpp) and the per-format kernel
// translation units (moe_w4_nvfp4.cu, moe_w4_mxfp4.cu). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe.h"
#include "backend/cuda/moe_w4.h"

namespace k3::cuda::w4 {

struct GemmArgs {
  const void* x;  // bf16 [R, K]
  int64_t ldx;
  const uint8_t* codes;
  const uint8_t* scales;
  const float* out_scale;
  void* y;  // bf16 or f32 [R, N]
  int64_t ldy;
  int n, k, part_rows, parts;
  const int32_t* offsets;
};

// Launches the kernel of `tile` (kM16 / kM64 / kM128) for format F over the tile map.
template <W4Format F>
void launch_gemm(MoeTile tile, bool f32_out, const GemmArgs& a, const MoeTileMap& map, cudaStream_t stream);

extern template void launch_gemm<W4Format::kNvfp4>(MoeTile, bool, const GemmArgs&, const MoeTileMap&, cudaStream_t);
extern template void launch_gemm<W4Format::kMxfp4>(MoeTile, bool, const GemmArgs&, const MoeTileMap&, cudaStream_t);

}  // namespace k3::cuda::w4
