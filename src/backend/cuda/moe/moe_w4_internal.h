// Between the host side of the 4-bit expert GEMMs (moe_w4.cpp) and the per-format kernel
// translation units (moe_w4_nvfp4.cu, moe_w4_mxfp4.cu: the tile kernels; moe_w4_wgmma_nvfp4.cu, moe_w4_wgmma_mxfp4.cu:
// the warpgroup-MMA prefill kernel; moe_w4_decode_nvfp4.cu,
// moe_w4_decode_mxfp4.cu: the decode kernel). Host-only header.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe/moe_w4.h"
#include "backend/cuda/moe/moe_w4_tuning.h"
#include "backend/cuda/moe/moe_w4_layout.h"
#include "backend/cuda/ops/ops.h"

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
  const float* row_weight;  // [R] or null: each sorted row's output scaled by it (MoeDispatch::row_weight)
};

// Launches the mma.sync tile kernel of `tile` (kM16 / kM64) for format F over the tile map.
template <W4Format F>
void launch_gemm(MoeTile tile, bool f32_out, const GemmArgs& a, const MoeTileMap& map, cudaStream_t stream);

extern template void launch_gemm<W4Format::kNvfp4>(MoeTile, bool, const GemmArgs&, const MoeTileMap&, cudaStream_t);
extern template void launch_gemm<W4Format::kMxfp4>(MoeTile, bool, const GemmArgs&, const MoeTileMap&, cudaStream_t);

// The prefill kernel on warpgroup MMA (moe_w4_wgmma.cuh, sm_90a) over the kM128 tile map, one
// persistent CTA per multiprocessor. Its operands come by TMA: `x` maps a.x in boxes of
// kWgmmaBoxRows × 64 (tensor_map_bf16_sw128); `codes` and `scales` map the bank as [row groups,
// chunks, words of a group's chunk] in boxes of kWgmmaBoxGroups groups × kWgmmaStageChunks chunks.
inline constexpr int kWgmmaBoxRows = 16;
inline constexpr int kWgmmaBoxGroups = 4;  // half an item: its groups 0-3 and 4-7
inline constexpr int kWgmmaStageChunks = 2;
struct WgmmaMaps {
  CUtensorMap x, codes, scales;
};
template <W4Format F>
void launch_wgmma(bool f32_out, const WgmmaMaps& maps, const GemmArgs& a, const MoeTileMap& map, int multiprocessors,
                  cudaStream_t stream);

extern template void launch_wgmma<W4Format::kNvfp4>(bool, const WgmmaMaps&, const GemmArgs&, const MoeTileMap&, int,
                                                    cudaStream_t);
extern template void launch_wgmma<W4Format::kMxfp4>(bool, const WgmmaMaps&, const GemmArgs&, const MoeTileMap&, int,
                                                    cudaStream_t);

// The decode kernel (moe_w4_decode.cuh): 16 warps = 8 K slices × 2 pairs of 16-row groups per unit
// of 64 weight rows, `xrows` (16 or 8) of the tile's activation rows in shared memory, a cp.async ring
// of `stages` stages (one chunk of both groups: 2·(512 + scale bytes)) per warp. Shared memory:
// activations xrows·K·2 + rings 16·stages·2·(512 + scale bytes) + the slices' partial sums 8·8·68·4.
inline constexpr int kDecodeSlices = 8;
inline constexpr int kDecodeXRows = 16;
inline constexpr int kDecodeRedLd = 68;
struct DecodeShape {
  int stages, xrows;
};
inline constexpr DecodeShape kDecode16{5, 16};        // 4 stages = 4.6 KB in flight per warp, 74 KB per SM; K ≤ 3840
inline constexpr DecodeShape kDecode16Shallow{3, 16};  // K ≤ 4992 (and the depth measurement)
inline constexpr DecodeShape kDecode8{8, 8};          // 7 stages = 8 KB per warp, 129 KB per SM; K ≤ 4224
inline constexpr size_t decode_smem_bytes(W4Format f, int64_t k, int stages, int xrows) {
  const int sb = scale_bytes_per_chunk(f == W4Format::kNvfp4 ? kNvfp4Bits : kMxfp4Bits);
  return static_cast<size_t>(xrows * k * 2) +
         static_cast<size_t>(2 * kDecodeSlices * stages * 2 * (kChunkCodeBytes + sb)) +
         static_cast<size_t>(kDecodeSlices * 8 * kDecodeRedLd * 4);
}

// Split-K of the decode kernel: its units become (tile, 64 weight rows, split), split s covering
// chunks [s·chunks, min(K/64, (s+1)·chunks)); shared memory holds the split's columns only
// (decode_smem_bytes at K = chunks·64). splits == 1 (chunks = K/64): the kernel applies the epilogue
// itself and `part` is unused. splits > 1: it writes each split's raw fp32 sum — no 2^7, out_scale or
// row_weight — to part[s][r][n] (rows = the dispatch's R, r the sorted row), and launch_split_sum
// then forms y.
struct DecodeSplit {
  int splits = 1, chunks = 0;
  float* part = nullptr;  // [splits][rows][N] f32, 16-byte aligned
  int64_t rows = 0;
};

template <W4Format F>
void launch_decode(DecodeShape shape, bool f32_out, const GemmArgs& a, const DecodeSplit& split, const MoeTileMap& map,
                   cudaStream_t stream);

extern template void launch_decode<W4Format::kNvfp4>(DecodeShape, bool, const GemmArgs&, const DecodeSplit&,
                                                     const MoeTileMap&, cudaStream_t);
extern template void launch_decode<W4Format::kMxfp4>(DecodeShape, bool, const GemmArgs&, const DecodeSplit&,
                                                     const MoeTileMap&, cudaStream_t);

// After a split launch_decode on the same stream (moe_w4_split.cu): for every sorted row r an expert
// covers (expert_offsets[0] <= r < expert_offsets[experts]) and column n,
// y[r][n] = (Σ_{s = 0 … splits−1, in that order} part[s][r][n]) · 2^7 · out_scale[e·parts + n / part_rows]
// (· row_weight[r] when set), e the expert of r: the unsplit kernel's epilogue on the summed splits.
// Rows no expert covers are left alone.
void launch_split_sum(bool f32_out, const GemmArgs& a, const DecodeSplit& split, int experts, cudaStream_t stream);

}  // namespace k3::cuda::w4
