// The W4A8 expert GEMM's tile choice and the entry points that force a tile and a weight path
// (moe_w4a8.h), for the kernels, the tests and the benchmarks. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe/moe_tiles.h"
#include "quant/formats/modelslim/cuda/moe_w4a8.h"
#include "quant/formats/modelslim/cuda/moe_w4a8_internal.h"

namespace k3::cuda {

// The host-side tile from the shapes alone (never the counts), measured on the H200 for the Kimi-K3
// layer (k3_bench_cuda --moe-w4a8, 2026-11-29): per-channel banks take kM64 at every size (1.3× kM16
// at decode); grouped banks kM16 up to 16 rows per expert, else kM64. No kM128 kernel
// (docs/decisions/w4a8-tile-choice.md).
MoeTile moe_w4a8_tile_for(int64_t rows, int64_t experts, bool grouped);

// moe_grouped_gemm_w4a8 at a forced tile: kM16 or kM64 (kAuto: moe_w4a8_tile_for's for the
// dispatch's choice E; kM128 throws).
void moe_grouped_gemm_w4a8(const Int8Rows& xs, const MoeW4A8Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                           cudaStream_t stream, MoeTile tile);
// The same with the weight path forced (w4a8::WeightPath; the other overloads run kSharedRing): the
// A/B benchmark and the bit-identity test.
void moe_grouped_gemm_w4a8(const Int8Rows& xs, const MoeW4A8Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                           cudaStream_t stream, MoeTile tile, w4a8::WeightPath path);

}  // namespace k3::cuda
