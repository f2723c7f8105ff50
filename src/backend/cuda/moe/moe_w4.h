// 4-bit routed-expert GEMMs, W4A16: NVFP4 (E2M1 codes, E4M3 scale per 16 columns, FP32
// global scale) and MXFP4 (E2M1 codes, E8M0 scale per 32) expert banks stay packed in GPU memory and
// are dequantised in registers inside grouped GEMMs over a MoE dispatch (moe.h); activations bf16,
// fp32 accumulation on tensor cores (mma.sync m16n8k16 bf16; wgmma m64nNk16 for the kWgmma prefill kernel).
//
// Layout: repacked at upload from the checkpoint's [N, K/2] codes (even column in the low nibble) and
// [N, K/group] scales into 16-row × 64-column tiles ordered as the kernels' mma fragments
// (moe_w4_layout.h); byte counts and each expert's offsets are the checkpoint's.
//
// Scale contract (spec §3.4: every factor once):
//   block scales (E4M3 / E8M0) — inside the in-register dequantisation of each weight;
//   out_scale[e·parts + p] (f32) — once, on the fp32 accumulator in the epilogue, for output columns
//     [p·N/parts, (p+1)·N/parts) of expert e. For W4A16 it is NVFP4's weight_scale_2 of that matrix
//     (GEMM1 [w1|w3]: parts = 2, gate then up) and 1 for MXFP4; a caller folding an alpha (a1·scale_2,
//     spec §3.2) stores the product instead. Nothing else is applied.
//
// Kernels (W4Kernel, moe_w4_tuning.h), chosen from shapes by moe_w4_kernel_for. In all of them the weight tile is the
// mma A operand (rows of W on the m16 side, tokens on the n8 side), so each packed byte is read from
// HBM once per expert and met by all of that expert's rows:
//   kDecode  decode class (moe_w4_decode.cuh): persistent grid, one CTA of 16 warps per SM over equal
//          ranges of (kM16 tile, 64 weight rows) units; weights HBM → shared memory through per-warp
//          cp.async rings (5 stages), the tile's ≤ 16 activation rows in shared memory once per tile,
//          K split over 8 warp pairs. Needs 16·K·2 + ~110 KB of shared memory (K ≤ 3840; kDecode3,
//          the same with 3 stages, K ≤ 4992);
//   kDecode8 the same with 8 activation rows in shared memory and 8-stage rings (a tile of 9–16
//          rows takes two passes over its weights; K ≤ 4224): chosen while experts average ≤ 2 rows.
//          Either decode kernel splits K into up to 16 ranges (units of (tile, split, 64 rows), the
//          partial sums through a caller's workspace) where K does not fit its shared memory;
//   kM16   the tile kernel of the decode class (moe_w4_gemm.cuh): ≤ 16 rows of one expert per CTA,
//          128 weight rows per CTA, weights prefetched into registers — the fallback for larger K
//          without a workspace;
//   kM64   prefill class on mma.sync: 64 rows of one expert per CTA, same dequantisation, tensor
//          cores busy (n8 fragments past the expert's rows are skipped); 17–48 rows per expert;
//   kWgmma the prefill class on Hopper warpgroup MMA (moe_w4_wgmma.cuh): persistent warp-specialised
//          CTAs over items of ≤ 128 rows of one expert × 128 weight rows; codes, scales and activations
//          by TMA into mbarrier rings, the A operand dequantised in registers, wgmma N = the item's
//          rows rounded up to 16; above 48 rows per expert.
// No host synchronisation, grids sized by the dispatch's bounds: graph-capturable (moe.h).
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

enum class W4Format : uint8_t { kNvfp4, kMxfp4 };
const char* w4_format_name(W4Format f);
int w4_group(W4Format f);  // columns per block scale: 16 or 32

// A stacked bank of E experts, each N×K, in device memory (moe_w4_layout.h).
struct MoeW4Bank {
  W4Format format = W4Format::kNvfp4;
  int64_t experts = 0, n = 0, k = 0;
  int64_t parts = 1;             // output column ranges with their own per-expert scale (N % (16·parts) == 0)
  uint8_t* codes = nullptr;      // E·N·K/2 bytes
  uint8_t* scales = nullptr;     // E·N·K/group bytes
  float* out_scale = nullptr;    // [E·parts]

  int64_t rows() const { return experts * n; }
  size_t code_bytes() const { return static_cast<size_t>(rows() * k / 2); }
  size_t scale_bytes() const { return static_cast<size_t>(rows() * k / w4_group(format)); }
};

// Checkpoint bytes → bank layout for `rows` consecutive bank rows (rows % 16 == 0, k % 64 == 0):
// codes [rows, k/2] (element 2i in the low nibble of byte i), scales [rows, k/group] (E4M3 for NVFP4,
// E8M0 for MXFP4), written to dst_codes [rows·k/2] and dst_scales [rows·k/group] — the bank's bytes
// from row offset row0 on (codes + row0·k/2, scales + row0·k/group), row0 % 16 == 0. Exact: the
// dequantised values are unchanged. Throws on NaN scales and on MXFP4 scales above 2^8.
void moe_w4_repack(W4Format f, const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t k,
                   uint8_t* dst_codes, uint8_t* dst_scales);

// A bank's device buffers from the arena (contents undefined until uploaded).
MoeW4Bank moe_w4_alloc(Arena& arena, W4Format f, int64_t experts, int64_t n, int64_t k, int64_t parts,
                       const char* what);
// Repacks checkpoint bytes of bank rows [row0, row0 + rows) on the host and copies them in (load time).
void moe_w4_upload_rows(const MoeW4Bank& bank, int64_t row0, const uint8_t* codes, const uint8_t* scales,
                        int64_t rows);
// out_scale from the host: [E·parts] floats.
void moe_w4_upload_out_scale(const MoeW4Bank& bank, const float* host);

// ys[r] = out_scale(e, part) · xs[r] · dequant(W_e)ᵀ for every expert e and sorted row r of e:
// xs bf16 [R, K] (moe_gather), ys bf16 or f32 [R, N], 16-byte aligned rows. The kernel follows the
// shapes (moe_w4_tuning.h: moe_w4_kernel_for over the dispatch's choice E).
void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream);

// Device scratch for the decode kernel's split-K form (moe_w4_tuning.h): the splits' fp32 partial
// sums. 16-byte aligned; contents undefined before and after the call.
struct W4Workspace {
  float* data = nullptr;
  size_t bytes = 0;
};
// The workspace moe_grouped_gemm_w4(…, ws) wants for (w, d): 0 where the chosen kernel runs whole K,
// else the bytes of its split-K partial sums — host-known shapes only (R, N, K, E, the device's SMs).
size_t moe_w4_workspace_bytes(const MoeW4Bank& w, const MoeDispatch& d);
// moe_grouped_gemm_w4 with a workspace: where K does not fit the decode kernel's shared memory, K is
// split across CTAs and the partial sums, summed in a fixed
// order (deterministic), go through ws. Given fewer bytes than moe_w4_workspace_bytes, it runs as
// the overload without one.
void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream, const W4Workspace& ws);

}  // namespace k3::cuda
