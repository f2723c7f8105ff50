// MLA attention (spec §5, §10) on the GPU, NoPE, with the per-head dims of Kimi-K3 / Kimi-Linear:
// d_nope = 128, d_rope = 64 (never rotated), d_v = 128, kv_lora_rank r = 512; the cache row is
// [c (512, kv_a_layernorm-ed) | k_pe (64, raw)] = 576 values. The CPU reference is
// cpu::mla_mixer (backend/cpu/mla.cpp): expanded attention for multi-token slices, absorbed
// attention against the latent cache for one-token slices. Softmax scale = d_qk^-½ = 192^-½.
//
//   prefill:  q = q_b(…) [T, H·192], kvb = kv_b(c) [Tkv, H·256] (per head [k_nope | v]), k_pe from
//             the cache → mla_prefill_attention (causal, flash-style, output gate fused)
//   decode:   mla_absorb_q (q_lat = W_UKᵀ q_nope, | q_pe) → mla_decode_attention over the paged
//             latent cache (tile ranges over the batch + combine) → mla_unabsorb_o (W_UV, output gate)
// bf16 operands on tensor cores, fp32 accumulation and softmax. The prefill: mma.sync m16n8k16,
// fragments through ldmatrix(.trans), tiles by cp.async (docs/decisions/mla-operand-loads.md). The
// decode: wgmma from 16 heads, its 64-row cache tiles by tensor-map bulk copies, else mma.sync with
// tiles by plain bulk copies (docs/decisions/mla-decode-wgmma.md).
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

inline constexpr int kMlaNope = 128, kMlaRope = 64, kMlaQk = 192, kMlaV = 128, kMlaRank = 512;
inline constexpr int kMlaRow = kMlaRank + kMlaRope;  // 576
inline constexpr int kMlaDecodeTile = 64;            // tokens per decode step; pages are multiples

// Causal attention of packed query rows against packed key rows, per sequence s: queries
// cu_q[s]…cu_q[s+1] are the LAST q_len of the kv_len keys cu_kv[s]…cu_kv[s+1] (q_len ≤ kv_len; a
// prefill continuing a cached prefix has q_len < kv_len), key j visible to query i iff
// j ≤ kv_len − q_len + i.
//   q:    bf16 [Tq, H·192], per head [q_nope | q_pe]
//   kv:   bf16 [Tkv, H·256], per head [k_nope | v]
//   k_pe: bf16 [Tkv, 64], shared by all heads (a column view of the cache rows is fine)
//   gate: [Tq, H·128] f32 or bf16 raw g_proj logits (out *= sigmoid(gate)); gate.data == nullptr: none
//   out:  [Tq, H·128] f32 or bf16, head-major (h·128 + d)
// cu_q, cu_kv: device int32 [n + 1]; max_q_len: host bound of the query lengths.
void mla_prefill_attention(const int32_t* cu_q, const int32_t* cu_kv, int n, int max_q_len, const DeviceTensor& q,
                           const DeviceTensor& kv, const DeviceTensor& k_pe, const DeviceTensor& gate, float scale,
                           const DeviceTensor& out, cudaStream_t stream);

// The paged latent cache: rows of 576 bf16, page p holding tokens [p·page_size, (p+1)·page_size) of
// whichever sequence owns it; page_size % 64 == 0. block_table [B, ld] int32: sequence b's token j
// is row (block_table[b·ld + j / page_size] · page_size + j % page_size).
struct MlaPagedCache {
  const void* rows = nullptr;  // bf16 [num_rows][576]
  int64_t num_rows = 0;        // pages · page_size
  int page_size = 64;
  const int32_t* block_table = nullptr;
  int64_t block_table_ld = 0;
};

// q_abs[b][h] = [W_UK[h]ᵀ q_nope[b][h] (512) | q_pe[b][h] (64)], bf16.
//   q: [B, H·192] f32 or bf16; w_uk: bf16 [H·128, 512] (rows h·128 + e = W_UK[h][e][:], i.e. the
//   kv_b rows of k_nope); q_abs: bf16 [B, H·576].
void mla_absorb_q(const DeviceTensor& q, const DeviceTensor& w_uk, const DeviceTensor& q_abs, cudaStream_t stream);

// Decode attention, one query token per sequence, all H heads against the sequence's cache rows:
//   o_lat[b][h] = Σ_j softmax_j(scale · q_abs[b][h] · row_j) · row_j[:512]
// q_abs: bf16 [B, H·576]; seqlens: device int32 [B] (≥ 1); o_lat: f32 [B, H·512].
// Two kernels: kMma takes 16 or 32 heads as the M side of mma.sync products (few heads per cache row:
// memory-bound), kWgmma takes a 64-token cache tile as the M side and 32 or 48 heads as the N side of
// wgmma products (many heads per row: compute-bound). kAuto: mla_decode_kernel_for, the one place
// that chooses.
enum class MlaDecodeKernel { kAuto, kMma, kWgmma };
MlaDecodeKernel mla_decode_kernel_for(int heads);

// How the 64-token tiles of the batch's sequences are spread over the CTAs of each head block. The
// CTAs take contiguous ranges of the sequences' tiles laid end to end; a range that is not a whole
// sequence leaves a partial O with its log-sum-exp, which a combine kernel merges per sequence.
//   kBalanced:    `balanced_ranges` ranges of equal length over the whole batch (a range may cross
//                 from one sequence into the next): uneven context lengths cost nothing.
//   kPerSequence: every sequence cut into `splits` equal ranges (some empty when it is short).
//   kAdaptive:    per call, whichever of the two the cost model (mla_decode.cuh) finds faster for the
//                 call's lengths: per sequence where the lengths are even enough, else balanced.
// The ranges are laid out on the GPU from the device seqlens by a small kernel (CUDA-graph safe).
// The mma.sync kernel takes kPerSequence only. kAuto: kAdaptive for wgmma, kPerSequence for mma.sync.
// `chained`: the decode and combine kernels are programmatic dependents (core/launch.h) of the kernel
// before them, so each is launched while its predecessor runs and waits for it on the GPU. Off by
// default: they save 1–3 µs on short calls, but the cost model behind kAdaptive is fitted on plain
// launches and misjudges B = 1 chained (docs/decisions/mla-decode-wgmma.md).
enum class MlaDecodeSchedule { kAuto, kBalanced, kPerSequence, kAdaptive };
struct MlaDecodePlan {
  MlaDecodeKernel kernel = MlaDecodeKernel::kAuto;        // resolved by mla_decode_plan
  MlaDecodeSchedule schedule = MlaDecodeSchedule::kAuto;  // resolved by mla_decode_plan
  int balanced_ranges = 1;  // as many as the GPU holds CTAs of every head block at once
  int splits = 1;           // per sequence: the count that minimises the cost for max_seqlen tokens
  bool chained = false;     // programmatic dependent launches; false (the default): plain stream order
};
// count > 0 replaces the schedule's own count (balanced_ranges or splits; both for kAdaptive).
MlaDecodePlan mla_decode_plan(int batch, int heads, int max_seqlen, int multiprocessors,
                              MlaDecodeKernel kernel = MlaDecodeKernel::kAuto,
                              MlaDecodeSchedule schedule = MlaDecodeSchedule::kAuto, int count = 0);
size_t mla_decode_workspace_bytes(const MlaDecodePlan& plan, int batch, int heads);
void mla_decode_attention(const DeviceTensor& q_abs, const MlaPagedCache& cache, const int32_t* seqlens, int batch,
                          float scale, const MlaDecodePlan& plan, void* workspace, const DeviceTensor& o_lat,
                          cudaStream_t stream);

// out[b][h·128 + e] = (W_UV[h] o_lat[b][h])[e] · sigmoid(gate[b][h·128 + e]) (gate.data == nullptr:
// no gate). o_lat: f32 [B, H·512]; w_uv: bf16 [H·128, 512] (the kv_b rows of v); gate: f32/bf16
// [B, H·128]; out: f32/bf16 [B, H·128].
void mla_unabsorb_o(const DeviceTensor& o_lat, const DeviceTensor& w_uv, const DeviceTensor& gate,
                    const DeviceTensor& out, cudaStream_t stream);

}  // namespace k3::cuda
