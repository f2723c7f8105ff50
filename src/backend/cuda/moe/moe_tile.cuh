// Device side of the grouped GEMMs' tile maps (moe.h, moe_dispatch): which expert rows and which
// output columns one CTA computes. Only included from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace k3::cuda::detail {

// One CTA's work: rows [row0, row0 + rows) of the sorted rows, all of `expert`, against output
// columns from col0 on (col_span of them, clipped to N by the kernel).
struct MoeCtaTile {
  int expert, row0, rows, col0;
};

// Work item `index` of a tile map with n_slices items per tile: expert e's tiles [first, first +
// count) own items [first·n_slices, (first + count)·n_slices), the m-tile running fastest within
// that range. Returns false for items past the map's live tiles. tile_rows: the map's tile height;
// col_span: output columns per slice.
__device__ __forceinline__ bool moe_tile_item(int index, int n_slices, int tile_rows, int col_span,
                                              const int32_t* __restrict__ tile_count, const int4* __restrict__ tiles,
                                              const int32_t* __restrict__ offsets, MoeCtaTile& t) {
  const int q = index / n_slices;
  if (q >= *tile_count) return false;
  const int4 tq = tiles[q];
  const int local = index - tq.z * n_slices;
  const int mt = tq.z + local % tq.w;
  const int4 tile = mt == q ? tq : tiles[mt];
  t.expert = tile.x;
  t.row0 = tile.y;
  t.rows = min(tile_rows, offsets[tile.x + 1] - tile.y);
  t.col0 = local / tq.w * col_span;
  return true;
}

// The grid is sized by the map's bound with n_slices CTAs per tile, CTA b computing item b; false for
// CTAs past the live tiles (they exit).
__device__ __forceinline__ bool moe_cta_tile(int n_slices, int tile_rows, int col_span,
                                             const int32_t* __restrict__ tile_count, const int4* __restrict__ tiles,
                                             const int32_t* __restrict__ offsets, MoeCtaTile& t) {
  return moe_tile_item(static_cast<int>(blockIdx.x), n_slices, tile_rows, col_span, tile_count, tiles, offsets, t);
}

}  // namespace k3::cuda::detail
