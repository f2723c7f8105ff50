// The 4-bit expert GEMMs' kernel choice and the entry points that force a kernel (moe_w4.h), for the
// kernels, the tests and the benchmarks; the rest of the backend calls the moe_w4.h entry points.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe/moe_tiles.h"
#include "backend/cuda/moe/moe_w4.h"

namespace k3::cuda {

// The host-side tile class from the shapes alone (never the counts): kM16 (decode class) while
// experts see few rows, then the prefill-class tile heights.
MoeTile moe_w4_tile_for(int64_t rows, int64_t experts);

enum class W4Kernel : uint8_t { kAuto, kDecode, kDecode3, kDecode8, kM16, kM64, kWgmma };
// "dec", "dec3", "dec8", "m16", "m64", "wg" ("auto" for kAuto)
const char* w4_kernel_name(W4Kernel k);
// Whether a decode kernel (kDecode / kDecode3 / kDecode8) fits K on the current device.
bool moe_w4_decode_fits(W4Format f, int64_t k, W4Kernel kernel = W4Kernel::kDecode);
// The kernel of a tile class: kM16 → kDecode8 while experts average ≤ 2 rows, else kDecode, each
// where it fits K (else kDecode3); where none fits K, the one the rows pick in its split-K form
// (moe_w4_decode_splits) while K/16 fits it, else kM16; kM64 → kM64; kM128 → kWgmma; kAuto →
// moe_w4_tile_for's class first. A dispatch given no workspace runs kM16 where the decode kernel
// would need splits to fit K. docs/decisions/w4-decode-kernel-choice.md, w4-prefill-kernel-per-tile-class.md.
W4Kernel moe_w4_kernel_for(MoeTile tile, W4Format f, int64_t rows, int64_t experts, int64_t k);

// Split-K of the decode kernels (moe_w4_decode.cuh): `splits` ranges of `moe_w4_split_chunks`
// 64-column chunks each (the last one shorter where they do not divide K/64), their fp32 partial
// sums in a workspace of moe_w4_split_workspace_bytes, summed in split order by a second kernel.
inline constexpr int kW4MaxSplits = 16;
// The split count of a decode kernel for K and `units` (64-row blocks × the tile map's bound), on
// `sms` multiprocessors: 1 where the kernel fits K; else, among the counts
// ≤ min(16, K/64) whose split fits shared memory, the smallest whose busiest SM does at most 1/16 more
// than the least any count gives (ceil(units·s / sms) / s of a whole-K unit); 0 where no split fits.
int moe_w4_decode_splits(W4Format f, int64_t k, int64_t units, int sms, W4Kernel kernel);
// Chunks per split: ceil(K/64 / splits). The splits that run are ceil(K/64 / chunks) (≤ splits).
int64_t moe_w4_split_chunks(int64_t k, int splits);
// f32 [splits][rows][n].
size_t moe_w4_split_workspace_bytes(int64_t splits, int64_t rows, int64_t n);

// moe_grouped_gemm_w4 with the kernel forced (kAuto: the choice above
// for the dispatch's choice E); the MoeTile overload takes the tile class's kernel. A forced decode
// kernel with a workspace splits K as moe_w4_decode_splits says, or in `splits` (> 0: forced, the
// workspace must hold them); without one it runs whole K, and throws where that does not fit.
void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream, W4Kernel kernel);
void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream, W4Kernel kernel, const W4Workspace& ws, int splits = 0);
void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream, MoeTile tile);

}  // namespace k3::cuda
