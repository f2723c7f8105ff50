// MoE expert dispatch on the GPU (spec §7): the router's picks (moe_router.cu) become rows sorted by
// expert, every expert's rows go through a grouped GEMM against its slice of a stacked weight bank,
// and the results are summed back per token with the routing weights.
//
//   moe_route → moe_dispatch (counts, offsets, sorted rows, tile map) → moe_gather → grouped GEMM 1
//   (stacked [w1 | w3] per expert) → gated_activation (ops.h) → grouped GEMM 2 (w2) → moe_combine
//
// The model (model/ffn_block.cpp) applies the routing weights in GEMM 2's epilogue (moe_row_weights,
// moe_weighted) and combines without them; moe_combine can also apply them itself.
//
// Nothing here synchronises with the host or needs the per-expert counts on the host: grids are
// sized by upper bounds (T·k rows, at most min(E, T·k) + T·k / tile partially filled tiles) and idle
// CTAs exit, so a whole MoE layer can be captured in a CUDA graph and replayed.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

// Device views of one dispatch of T tokens × top-k picks over E experts (R = T·k sorted rows).
struct MoeDispatch {
  int64_t tokens = 0, top_k = 0, experts = 0;
  int32_t* expert_offsets = nullptr;  // [E + 1]: expert e owns sorted rows [off[e], off[e+1])
  int32_t* sorted_token = nullptr;    // [R]: the token whose row sits at each sorted position
  int32_t* pick_row = nullptr;        // [T·k]: the sorted position of pick (t, j), index t·k + j
  void* tiles = nullptr;              // the grouped GEMMs' tile maps (moe_tiles.h)
  // [R] or null: when set, every grouped GEMM over this dispatch multiplies sorted row r's output by
  // row_weight[r] in its epilogue — GEMM 2 over moe_weighted(d, …) applies the routing weights, and
  // moe_combine then sums the rows as they are.
  const float* row_weight = nullptr;
  // The E the grouped GEMMs choose their kernels for, from the shapes alone (never the counts):
  // `experts` (moe_dispatch_view), or the model's when the dispatch runs over a bank of
  // expert-streaming slots, so that a streamed layer runs the kernels of a resident one.
  int64_t choice_experts = 0;

  int64_t rows() const { return tokens * top_k; }
};

// row_weight[pick_row[t·k + j]] = weights[t, j] for every counted pick (weights f32 [T, k]; row_weight
// device f32 [R]; rows no pick names are left alone). After moe_dispatch on the same stream.
void moe_row_weights(const DeviceTensor& weights, const MoeDispatch& d, float* row_weight, cudaStream_t stream);
// The dispatch with its GEMMs' outputs scaled per sorted row (row_weight from moe_row_weights).
inline MoeDispatch moe_weighted(MoeDispatch d, const float* row_weight) {
  d.row_weight = row_weight;
  return d;
}

// Bytes of the dispatch's device buffers for T tokens, top-k, E experts (all of MoeDispatch).
size_t moe_dispatch_bytes(int64_t tokens, int64_t top_k, int64_t experts);
// Lays a dispatch out in `buffer` (moe_dispatch_bytes, 256-byte aligned).
MoeDispatch moe_dispatch_view(void* buffer, int64_t tokens, int64_t top_k, int64_t experts);

// From the router's ids (i32 [T, k], each in [0, E); duplicates within a token allowed): per-expert
// counts and offsets, the sorted order (within an expert, rows in (t, j) order, so the result is
// deterministic) and the tile maps. One CTA; E <= 1024.
// A negative id skips its pick (expert streaming, docs/cuda-backend.md): it is not counted, its pick_row is
// −1, and the counted rows end at expert_offsets[E] ≤ R; sorted rows past them name token 0, so a
// gather over all R rows stays in bounds, and no tile covers them.
void moe_dispatch(const DeviceTensor& ids, const MoeDispatch& d, cudaStream_t stream);

// The dispatch of every row to one expert (a view of E = 1, top-k 1: a dense linear run by a bank of
// one expert): the arrays moe_dispatch makes from T zero ids — offsets {0, T}, rows in order, every
// tile map — written by T-parallel threads in one launch, with no ids to read.
void moe_one_expert_dispatch(const MoeDispatch& d, cudaStream_t stream);

// out[t, j] = map[ids[t, j]]: the router's picks renamed to a bank's own expert indices, −1 for the
// experts the bank lacks (hybrid CPU/GPU experts: the GPU's bank holds only its experts). ids, out:
// i32 [T, k]; map: device i32 [experts]; ids outside [0, experts) become −1.
void moe_map_experts(const DeviceTensor& ids, const int32_t* map, int64_t experts, const DeviceTensor& out,
                     cudaStream_t stream);

// xs[r] = x[sorted_token[r]]: x f32 or bf16 [T, K]; xs bf16 [R, K].
void moe_gather(const DeviceTensor& x, const MoeDispatch& d, const DeviceTensor& xs, cudaStream_t stream);

// Grouped GEMM over the dispatch: for every expert e and sorted row r of e,
//   ys[r] = xs[r] · W_eᵀ,  W_e = w rows [e·N, (e+1)·N) of the stacked bank w: bf16 [E·N, K].
// xs: bf16 [R, K]; ys: bf16 or f32 [R, N]. fp32 accumulation on tensor cores. K % 8 == 0, N % 8 == 0,
// rows 16-byte aligned. The tile height follows the rows per expert (moe_tiles.h).
void moe_grouped_gemm_bf16(const DeviceTensor& xs, const DeviceTensor& w, const MoeDispatch& d, const DeviceTensor& ys,
                           cudaStream_t stream);

// out[t] = Σ_j weights[t, j] · ys[pick_row[t·k + j]]  (+ out[t] when accumulate): ys f32 or bf16
// [R, N]; weights f32 [T, k], or empty (no data) when ys already carries them (GEMM 2 over
// moe_weighted): then out[t] = Σ_j ys[pick_row[t·k + j]]; out f32 or bf16 [T, N]. Summed in pick order
// j = 0…k−1 in fp32 (fma), then added to the old out[t] when accumulating. Picks whose pick_row is −1
// (skipped by the dispatch) add nothing; a token with no counted pick gets 0 (or keeps out[t] when
// accumulating).
void moe_combine(const DeviceTensor& ys, const MoeDispatch& d, const DeviceTensor& weights, const DeviceTensor& out,
                 bool accumulate, cudaStream_t stream);

}  // namespace k3::cuda
