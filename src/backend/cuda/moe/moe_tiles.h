// The tile maps of a MoE dispatch (moe.h) and the tile heights of the grouped GEMMs, for the grouped
// GEMM kernels, their tests and the benchmarks; the rest of the backend calls the moe.h entry points,
// which choose the tile from the shapes. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe/moe.h"

namespace k3::cuda {

// Grouped-GEMM tile heights: the rows of one expert one CTA computes. moe_dispatch builds the tile
// map of every height, so each GEMM may run any of them. kAuto = moe_tile_for(T·k, choice E).
enum class MoeTile { kAuto, kM16, kM64, kM128 };
inline constexpr int kMoeTileHeights = 3;  // kM16, kM64, kM128
int moe_tile_rows(MoeTile tile);           // 16, 64, 128 (kAuto: throws)
// The host-side choice from the shapes alone (never the counts): small tiles stream each expert's
// weights once when experts see few rows (decode), tall tiles reuse them when they see many.
MoeTile moe_tile_for(int64_t rows, int64_t experts);

// One tile map of a dispatch, in device memory: *count tiles, ordered by expert, then row; tile i is
// tiles[4i .. 4i+3] = {expert, first sorted row, the expert's first tile, the expert's tile count}
// and covers rows [first, min(first + height, off[expert + 1])). bound: the upper bound on *count
// that grids are sized with, min(E, R) + R / height.
struct MoeTileMap {
  const int32_t* count = nullptr;
  const int32_t* tiles = nullptr;
  int64_t bound = 0;
};
MoeTileMap moe_tile_map(const MoeDispatch& d, MoeTile tile);

// The choice E of a dispatch (MoeDispatch::choice_experts; `experts` where unset).
inline int64_t moe_choice_experts(const MoeDispatch& d) { return d.choice_experts > 0 ? d.choice_experts : d.experts; }

// moe_grouped_gemm_bf16 at a forced tile height (kAuto: moe_tile_for's).
void moe_grouped_gemm_bf16(const DeviceTensor& xs, const DeviceTensor& w, const MoeDispatch& d, const DeviceTensor& ys,
                           cudaStream_t stream, MoeTile tile);

}  // namespace k3::cuda
