// ModelSlim W4A8_DYNAMIC routed experts on the GPU (spec §4.3): int4 weight codes stay packed
// in GPU memory and meet int8 activations on the integer tensor cores (mma.sync m16n8k32 s8 → s32), the
// int4 codes widened to s8 in registers.
//
// Activation contract (the CPU's ActivationForm::Int8PerToken, bit for bit): per row, amax = max |x|,
// s = amax / 127 (fp32 division), code = clamp(round-half-even(x / s), −127, 127) (IEEE division);
// an all-zero row has s = 0 and zero codes. moe_quantize_int8_rows does it; the GEMM takes its output.
//
// Weights: the checkpoint's signed int4 codes q ∈ [−8, 7] (new layout: I8 [N/2, K], rows 2r / 2r+1 in
// the low / high nibble; old layout: one code per byte, I8 [N, K]), repacked at upload into mma
// fragment order (moe_w4a8_layout.h). Offsets must be zero (read_modelslim_weight rejects others);
// scale_bias is not read: it is the NPU kernel's compensation for its unsigned view of the codes.
//
// Scale contract (every factor once): for row r of expert e, output column n in part p,
//   ys[r][n] = out_scale[e·parts + p] · s_r · Σ_j scale[n][j] · Σ_{k in group j} q[n][k]·c_r[k]
// with scale[n][j] = weight_scale[n] · weight_scale_second[n][j] in fp32 (per channel: weight_scale[n],
// one group of K columns). Integer group sums are exact (int32); the float part is, per group,
// acc = fma(float(sum), scale, acc), then acc · s_r, then · out_scale — the CPU int8_dot order; out_scale
// is 1 for ModelSlim (a caller may fold an alpha into it, as moe_w4.h's out_scale).
//
// Kernels (moe_w4a8.cu), chosen by moe_w4a8_tile_for (moe_w4a8_tuning.h):
//   kM16   ≤ 16 sorted rows of one expert per CTA, 128 weight rows per CTA; the weights are the mma A
//          operand, so each packed byte is read once per expert;
//   kM64   64 rows of one expert per CTA (n8 fragments past them skipped).
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

// A stacked bank of E experts, each N×K, in device memory (moe_w4a8_layout.h).
struct MoeW4A8Bank {
  int64_t experts = 0, n = 0, k = 0;
  int64_t group_size = 0;      // the checkpoint's (0: per channel)
  int64_t parts = 1;           // output column ranges with their own out_scale (N % (16·parts) == 0)
  uint8_t* codes = nullptr;    // E·N·K/2 bytes
  float* scales = nullptr;     // E·N·groups()
  float* out_scale = nullptr;  // [E·parts]

  int64_t rows() const { return experts * n; }
  int64_t group() const { return group_size > 0 ? group_size : k; }  // columns per scale
  int64_t groups() const { return k / group(); }
  size_t code_bytes() const { return static_cast<size_t>(rows() * k / 2); }
  size_t scale_count() const { return static_cast<size_t>(rows() * groups()); }
};

// Rows quantised to int8 by moe_quantize_int8_rows: codes kU8 [R, K] holding s8 values, scale f32 [R].
struct Int8Rows {
  DeviceTensor codes;
  float* scale = nullptr;
};

// Checkpoint bytes of `rows` consecutive bank rows → bank layout (rows % 16 == 0, K % 64 == 0;
// group_size 0 = per channel, else a multiple of 64 dividing K). weight: packed_along_n ? [rows/2, K]
// : [rows, K]; scale [rows]; scale_second [rows, K/group_size] (unused per channel). Writes
// dst_codes [rows·K/2] and dst_scales [rows·K/group] — the bank's from row offset row0 on (codes +
// row0·K/2, scales + row0·groups), row0 % 16 == 0. Exact: the codes decode back unchanged and each
// scale is the fp32 product above. Throws on old-layout codes outside [−8, 7].
void moe_w4a8_repack(const int8_t* weight, bool packed_along_n, const float* scale, const float* scale_second,
                     int64_t group_size, int64_t rows, int64_t k, uint8_t* dst_codes, float* dst_scales);

// A bank's device buffers from the arena (contents undefined until uploaded); group_size as above.
MoeW4A8Bank moe_w4a8_alloc(Arena& arena, int64_t experts, int64_t n, int64_t k, int64_t group_size, int64_t parts,
                           const char* what);
// Repacks checkpoint bytes of bank rows [row0, row0 + rows) on the host and copies them in (load time):
// one expert's matrix, or its gate / up half of a stacked [w1 | w3].
void moe_w4a8_upload_rows(const MoeW4A8Bank& bank, int64_t row0, const int8_t* weight, bool packed_along_n,
                          const float* scale, const float* scale_second, int64_t rows);
// out_scale from the host: [E·parts] floats.
void moe_w4a8_upload_out_scale(const MoeW4A8Bank& bank, const float* host);

// The activation contract above, per row of x (f32 or bf16 [R, K], K % 8 == 0, 16-byte aligned rows):
// codes into q.codes, s into q.scale. One CTA per row.
void moe_quantize_int8_rows(const DeviceTensor& x, const Int8Rows& q, cudaStream_t stream);
// GEMM 2's input in one pass: the same contract over act(gate, up) rounded to bf16 (ops.h's
// gated_activation; gate, up bf16 [R, K], e.g. the halves of GEMM 1's output) — bit for bit
// gated_activation into bf16 followed by moe_quantize_int8_rows, without the bf16 rows in memory.
void moe_quantize_int8_activation(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                                  const Int8Rows& q, cudaStream_t stream);

// ys[r] = the scale contract above for every expert e and sorted row r of e: xs from
// moe_quantize_int8_rows over the sorted rows [R, K]; ys bf16 or f32 [R, N], 16-byte aligned rows.
// The tile follows the shapes (moe_w4a8_tuning.h).
void moe_grouped_gemm_w4a8(const Int8Rows& xs, const MoeW4A8Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                           cudaStream_t stream);

}  // namespace k3::cuda
