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
// where it fits K (else kDecode3, else kM16); kM64 → kM64; kM128 → kWgmma; kAuto → moe_w4_tile_for's
// class first. docs/decisions/w4-decode-kernel-choice.md, w4-prefill-kernel-per-tile-class.md.
W4Kernel moe_w4_kernel_for(MoeTile tile, W4Format f, int64_t rows, int64_t experts, int64_t k);

// moe_grouped_gemm_w4 with the kernel forced (kAuto: the choice above
// for the dispatch's choice E); the MoeTile overload takes the tile class's kernel.
void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream, W4Kernel kernel);
void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream, MoeTile tile);

}  // namespace k3::cuda
