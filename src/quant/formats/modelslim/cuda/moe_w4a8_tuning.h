// The W4A8 expert GEMM's tile choice and the entry points that force a tile and a weight path
// (moe_w4a8.h), for the kernels, the tests and the benchmarks. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe/moe_tiles.h"
#include "quant/formats/modelslim/cuda/moe_w4a8.h"
#include "quant/formats/modelslim/cuda/moe_w4a8_internal.h"

namespace k3::cuda {

// The host-side tile from the shapes alone (never the counts), measured for the Kimi-K3 layer
// (k3_bench_cuda --moe-w4a8): kM16 up to 16 rows per expert, per channel and grouped alike, else kM64.
// No kM128 kernel (docs/decisions/w4a8-tile-choice.md).
MoeTile moe_w4a8_tile_for(int64_t rows, int64_t experts);

// moe_grouped_gemm_w4a8 at a forced tile: kM16 or kM64 (kAuto: moe_w4a8_tile_for's for the
// dispatch's choice E; kM128 throws).
void moe_grouped_gemm_w4a8(const Int8Rows& xs, const MoeW4A8Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                           cudaStream_t stream, MoeTile tile);

}  // namespace k3::cuda
