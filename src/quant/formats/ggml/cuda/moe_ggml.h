// GGUF routed experts on the GPU: expert banks of GGML blocks (Q4_0, Q8_0, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K) kept in GPU memory exactly as stored in the checkpoint, and grouped kernels over a MoE
// dispatch (moe.h; docs/cuda-backend.md, "GGUF experts").
//
// Layout: bank row e·N + n is weight row n of expert e, K / block_size blocks of the GGUF bytes, rows
// back to back (row_bytes apart), experts back to back; upload is a plain copy of the checkpoint's
// bytes (an expert's slice of a GGUF [E, N, K] tensor is already N such rows).
//
// Decode (moe_grouped_gemv_ggml): activations quantised once per sorted row to 8-bit blocks under the
// CPU's contract for the format (moe_ggml_blocks.h: ggml's vec_dot_type, int8 per 32 values for
// Q4_0 / Q8_0, per 256 for the K-quants, plus Σ codes per 16), then integer dp4a dot products per
// block with the block's integer scales, float scales per block, fp32 accumulation (as ggml's MMVQ).
// One CTA per (tile of ≤ 16 sorted rows of one expert, a slice of up to 128 weight rows: fewer for a
// bank of one expert, moe_ggml_tuning.h); a warp streams a few weight rows at once for all of the
// tile's tokens, so every packed byte is read once per tile. One kernel (moe_ggml_gemv.cu): each warp's
// rows stream through a cp.async ring in shared memory, launched as a programmatic dependent of the
// quantisation (its weights start streaming before the activations are ready).
//
// Prefill (moe_grouped_gemm_ggml): the mma.sync grouped GEMM of the bf16 experts
// (moe_grouped_gemm.cuh) with its weight tiles decoded from the GGML blocks on the way into shared
// memory: ggml's exact float values rounded to bf16 (the values llama.cpp's dequantise-then-GEMM
// prefill multiplies), bf16 activations, fp32 accumulation; the packed bytes are read once per m-tile
// and nothing is dequantised to memory. Its activation contract is bf16, not the decode's 8-bit blocks,
// so prefill and decode of one checkpoint differ by the activation rounding (docs/cuda-backend.md).
//
// Everything is graph-capturable: grids sized from the dispatch's bounds, idle CTAs exit.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/core/tensor.h"
#include "io/ggml_types.h"

namespace k3::cuda {

// True for the types the GPU expert kernels handle.
bool moe_ggml_supported(GgmlType type);

// A stacked bank of E experts, each N×K, of GGML blocks in device memory.
struct MoeGgmlBank {
  GgmlType type = GgmlType::Q4_K;
  int64_t experts = 0, n = 0, k = 0;
  uint8_t* data = nullptr;

  int64_t rows() const { return experts * n; }
  int64_t row_bytes() const;  // K / block_size · type_size
  size_t bytes() const { return static_cast<size_t>(rows() * row_bytes()); }
};

// Throws unless `type` is supported, K a positive multiple of its block and E, N > 0.
void moe_ggml_check_shape(GgmlType type, int64_t experts, int64_t n, int64_t k, const char* what);
// Throws unless the bank has memory, a valid shape and the dispatch's expert count (what: the caller).
void moe_ggml_check_bank(const MoeGgmlBank& bank, const MoeDispatch& d, const char* what);
// A bank's device memory from the arena (contents undefined until uploaded).
MoeGgmlBank moe_ggml_alloc(Arena& arena, GgmlType type, int64_t experts, int64_t n, int64_t k, const char* what);
// Copies `rows` GGUF rows (rows·row_bytes bytes, as stored) to bank rows [row0, row0 + rows): an
// expert's N rows at row0 = e·N, or the gate and up halves of a stacked [w1 | w3] bank separately.
void moe_ggml_upload_rows(const MoeGgmlBank& bank, int64_t row0, const uint8_t* host, int64_t rows);

// The 8-bit activations of R sorted rows (device memory): codes int8 [R, K], scale f32 [R, K / block],
// Σ codes per 16 int16 [R, K / 16]; block = the format's block (32 or 256).
struct MoeGgmlActs {
  int64_t rows = 0, k = 0, block = 0;
  int8_t* q = nullptr;
  float* scale = nullptr;
  int16_t* sums = nullptr;
};
size_t moe_ggml_acts_bytes(GgmlType type, int64_t rows, int64_t k);
// Lays the activations out in `buffer` (moe_ggml_acts_bytes bytes, 256-byte aligned).
MoeGgmlActs moe_ggml_acts_view(void* buffer, GgmlType type, int64_t rows, int64_t k);

// xs (bf16 or f32 [R, K], 16-byte aligned rows) → acts, the CPU's Int8Blocks contract bit for bit:
// scale = amax / 127, code = round-half-even(x · (127 / amax)) clamped to ±127 (IEEE division).
void moe_ggml_quantize(const DeviceTensor& xs, const MoeGgmlActs& acts, cudaStream_t stream);
// GEMM 2's input in one pass: the same contract over act(gate, up) rounded to bf16 (ops.h's
// gated_activation; gate, up bf16 [R, K], e.g. the halves of GEMM 1's output) — bit for bit
// gated_activation into bf16 followed by moe_ggml_quantize, without the bf16 rows in memory.
void moe_ggml_quantize_activation(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                                  const MoeGgmlActs& acts, cudaStream_t stream);

// Decode: ys[r] = xs[r] · W_eᵀ for every expert e and sorted row r of e, xs quantised into `acts`
// first (moe_ggml_quantize; acts sized for R = d.rows() rows and the bank's K). xs bf16 or f32 [R, K];
// ys f32 or bf16 [R, N]. Any number of rows per expert (experts with more than 16 take several tiles,
// each reading the expert's weights again: meant for few rows per expert). Each warp's weight rows
// stream through its own cp.async ring in shared memory (moe_ggml_tuning.h: rows per warp).
void moe_grouped_gemv_ggml(const DeviceTensor& xs, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const MoeGgmlActs& acts, const DeviceTensor& ys, cudaStream_t stream);
// The same over activations already quantised (moe_ggml_quantize or moe_ggml_quantize_activation).
void moe_grouped_gemv_ggml(const MoeGgmlActs& acts, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const DeviceTensor& ys, cudaStream_t stream);

// Prefill: ys[r] = xs[r] · bf16(W_e)ᵀ for every expert e and sorted row r of e. xs bf16 [R, K]; ys bf16
// or f32 [R, N]; N % 8 == 0; 16-byte aligned rows. Tile kM64 or kM128 from a per-type table
// (moe_ggml_tuning.h).
void moe_grouped_gemm_ggml(const DeviceTensor& xs, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const DeviceTensor& ys, cudaStream_t stream);

// Bank rows [row0, row0 + out.rows) as bf16 into out ([rows, K], 16-byte aligned rows): ggml's exact
// dequantisation rounded to bf16, the values the prefill GEMM multiplies.
void moe_ggml_dequantize_rows(const MoeGgmlBank& bank, int64_t row0, const DeviceTensor& out, cudaStream_t stream);

// A bank of one expert (a dense linear kept packed, executor/bank_linear.h) over many rows: ys = xs ·
// bf16(W)ᵀ by cuBLASLt's bf16 GEMM over the weight dequantised (moe_ggml_dequantize_rows) into `scratch`
// up to chunk_bytes at a time (at least 256 rows), given back before returning (stream-ordered). The
// prefill GEMM's contract (bf16 rows, bf16-rounded weights, fp32 accumulation) in cuBLASLt's summation
// order: the grouped GEMM decodes every weight tile once per m-tile, where this decodes it once, and over
// one expert its grid holds only N / 128 CTAs per m-tile. xs bf16 [R, K]; ys f32 or bf16 [R, N].
inline constexpr size_t kGgmlDenseChunkBytes = size_t{64} << 20;
void moe_ggml_dense_gemm(Blas& blas, Arena& scratch, const DeviceTensor& xs, const MoeGgmlBank& bank,
                         const DeviceTensor& ys, cudaStream_t stream, size_t chunk_bytes = kGgmlDenseChunkBytes);
// The rows from which the model multiplies a one-expert dispatch by moe_ggml_dense_gemm rather than the
// decode GEMV: where dequantising (packed read, bf16 write and re-read: about twice cuBLASLt's time over
// bf16 weights) costs less than the GEMV's dp4a work, which grows with the rows. H100 (k3_bench_cuda
// --ggml-dense, docs/performance.md), N 4096, K 7168: the GEMV takes 16–21 µs at 1 row, 31–42 at 8 and
// 51–70 at 16 (Q4_K, Q3_K, Q6_K), the dequantised product 61–65 at each: Q6_K crosses at about 14 rows,
// Q4_K and Q3_K near 20.
inline constexpr int64_t kGgmlDenseGemmRows = 16;
// Whether it does for this dispatch: a bank of one expert, no routing weights, at least
// kGgmlDenseGemmRows rows.
bool moe_ggml_dense_gemm_for(const MoeGgmlBank& bank, const MoeDispatch& d);

// Whether the model multiplies a dispatch over `bank` with the prefill GEMM (moe_grouped_gemm_ggml,
// bf16 rows) rather than the decode GEMV (moe_grouped_gemv_ggml, quantised rows): from the shapes
// alone, the rows per expert of the dispatch's choice E (moe_ggml_tile_for).
bool moe_ggml_prefill_gemm(const MoeGgmlBank& bank, const MoeDispatch& d);

}  // namespace k3::cuda
