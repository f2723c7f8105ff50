// The GGUF expert kernels' variants and choices (moe_ggml.h): the decode GEMV's rows per warp, token
// chunk and slice, and the prefill GEMM's tile, with the entry points that force them, for the kernels,
// the tests and the benchmarks. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe/moe_tiles.h"
#include "quant/formats/ggml/cuda/moe_ggml.h"

namespace k3::cuda {

// The decode GEMV: each warp's rows stream through its own cp.async ring in shared memory, a stage
// holding up to whole rows, each part's codes and scales unpacked once per row and step for all
// tokens. True when it takes `type` (every type moe_ggml_supported accepts) at `rows_per_warp`
// weight rows per warp (2, 3 or 4; a CTA takes 128 weight rows, 120 at 3; 1 and 8 were slower for
// every type: docs/decisions/gguf-gemv-rows-per-warp.md).
bool moe_ggml_gemv_supports(GgmlType type, int rows_per_warp);
// The tokens a warp of the GEMV holds accumulators for at once (its token chunk, 1 or 4). The one-token
// kernel needs 80 registers, where the four-token one takes 128, and so runs three CTAs per SM (75 KB
// rings) instead of two (113 KB); a tile of several tokens it streams from shared memory once per
// token. It is built for the types where it measured faster (moe_ggml_gemv_one_token: Q2_K, the most
// instructions per byte among the types whose four rows per warp fit its ring; H100, Kimi-K3's
// routed layer at 1 and 8 tokens a step: 13–18 % and 7–10 % less time; Q3_K, Q4_0 and Q4_K were
// mixed, faster in one GEMM or batch and slower in another, Q5_K and Q6_K slower in both:
// docs/performance.md). The model takes it for a routed bank of such a type where
// most tiles hold one token: at most one row per kGgmlGemvOneTokenExpertsPerRow experts (Kimi-K3, 896
// experts, top-16: up to 28 tokens a step); else 4.
inline constexpr int64_t kGgmlGemvOneTokenExpertsPerRow = 2;
bool moe_ggml_gemv_one_token(GgmlType type);
int moe_ggml_gemv_token_chunk(GgmlType type, int64_t rows, int64_t experts);
// The default rows per warp for a bank of `type` with K columns at a token chunk: the most of 4, 3, 2
// at which two ring stages of whole rows fit the chunk's ring, else 2 (Kimi-K3 GEMM 1 at chunk 4:
// Q2_K / Q3_K 4, Q4_K / Q4_0 3, Q5_K / Q6_K / Q8_0 2; H200, k3_bench_cuda --moe-ggml,
// docs/performance.md).
int moe_ggml_gemv_rows_per_warp(GgmlType type, int64_t k, int token_chunk = 4);

// The weight rows a CTA of the GEMV takes (its slice) at `rows_per_warp`: the fewest whole row groups
// (8 · rows_per_warp rows) for which ceil(n / slice) · tile_bound CTAs (the tile map's bound) fit one
// wave of the token chunk's CTAs per SM (its residency: three at 1, two at 4), at most 128 (120 at 3).
// A routed layer's grid keeps 128; a dense linear as one expert gets one wave of smaller slices (the
// fastest slice of every size at Kimi-K3's dense shapes, H100: docs/performance.md). Each output is
// one warp's sum in one order whatever the slice: the results are bit-identical.
int moe_ggml_gemv_slice_rows(int rows_per_warp, int64_t n, int64_t tile_bound, int multiprocessors,
                             int token_chunk = 4);

// moe_grouped_gemv_ggml with `rows_per_warp` weight rows a warp streams at once (0:
// moe_ggml_gemv_rows_per_warp), `slice_rows` weight rows per CTA (0: moe_ggml_gemv_slice_rows; else a
// multiple of 8 · rows_per_warp up to 128, 120 at 3) and `token_chunk` (0:
// moe_ggml_gemv_token_chunk; else 4, or 1 where moe_ggml_gemv_one_token). The results do not depend on
// any of them.
void moe_grouped_gemv_ggml(const DeviceTensor& xs, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const MoeGgmlActs& acts, const DeviceTensor& ys, cudaStream_t stream, int rows_per_warp,
                           int slice_rows = 0, int token_chunk = 0);
void moe_grouped_gemv_ggml(const MoeGgmlActs& acts, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const DeviceTensor& ys, cudaStream_t stream, int rows_per_warp, int slice_rows = 0,
                           int token_chunk = 0);

// moe_grouped_gemm_ggml at a forced tile: kM64 or kM128 (kAuto: kM128 where moe_ggml_tile_for picks
// it for the dispatch's choice E, else kM64); kM16 is the decode class (moe_grouped_gemv_ggml) and throws.
void moe_grouped_gemm_ggml(const DeviceTensor& xs, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const DeviceTensor& ys, cudaStream_t stream, MoeTile tile);

// Which kernel the model runs for `rows` sorted rows over `experts` experts of a bank of `type` with N
// output columns, from the shapes alone: kM16 = the decode GEMV (moe_grouped_gemv_ggml), kM64 / kM128
// = the prefill GEMM at that tile height (moe_grouped_gemm_ggml; needs N % 8 == 0, else the GEMV).
// Crossovers measured on the H200 at Kimi-K3's shapes (2026-12-02, docs/performance.md): kM64 beats
// the GEMV from 12–24 rows per expert depending on the type (at 18 already for Q2_K, Q3_K, Q6_K,
// Q8_0; at 37 for every type, 1.6–2.9×), kM128 beats kM64 from 62–86 (a per-type table in moe_ggml.cu).
MoeTile moe_ggml_tile_for(GgmlType type, int64_t rows, int64_t experts, int64_t n);

}  // namespace k3::cuda
