// Between the FP8-block expert GEMM's entry (moe_fp8_block.cu) and its decode kernel
// (moe_fp8_block_decode.cu). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe/moe_tiles.h"
#include "quant/formats/fp8/cuda/moe_fp8_block.h"

namespace k3::cuda::fp8_experts {

struct DecodeArgs {
  const void* x;  // bf16 [R, K]
  int64_t ldx;
  const uint8_t* codes;  // the bank's
  const float* scales;
  int64_t scale_ld;  // MoeFp8BlockBank::scale_cols
  void* y;           // bf16 or f32 [R, N]
  int64_t ldy;
  int n, k, n_tiles;
  const int32_t* offsets;
  const int32_t* tile_count;
  const int4* tiles;
  const float* row_weight;  // MoeDispatch::row_weight
};

// Whether the decode kernel takes an N × K bank (N % 64 == 0, K % 16 == 0).
bool decode_fits(int64_t n, int64_t k);
// The decode kernel over the dispatch's kM16 tile map.
void launch_decode(const DecodeArgs& a, const MoeTileMap& map, bool f32_out, cudaStream_t stream);

}  // namespace k3::cuda::fp8_experts
