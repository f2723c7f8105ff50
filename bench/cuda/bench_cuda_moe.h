// The MoE sections of k3_bench_cuda (bench_cuda_moe.cpp); the tables are described at the top of
// bench_cuda.cpp. Each prints its own header and rows, sized by the arena, and gives its arena back.
#pragma once

#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/stream.h"
#include "backend/cuda/gemm/gemm.h"
#include "bench_cuda_util.h"
#include "io/ggml_types.h"

namespace k3::cuda::bench {

// bf16 expert banks (backend/cuda/moe/moe.h) at the Kimi-Linear-48B-A3B, Kimi-K3 and "dense" shapes:
// the dispatch, each grouped GEMM (every tile height when `all_tiles`, else kAuto) and the routed layer.
void bench_moe(Arena& arena, Stream& stream, const RandomPool& bf16_pool, bool all_tiles);

// NVFP4 and MXFP4 expert banks (backend/cuda/moe/moe_w4.h) on the Kimi-K3 layer, every kernel choice
// against the bf16 grouped GEMM; `quick`: T = 1 … 512 only.
void bench_moe_w4(Arena& arena, Stream& stream, const RandomPool& bf16_pool, bool quick);

// ModelSlim W4A8 experts (quant/formats/modelslim/cuda/moe_w4a8.h): per channel and per group of 256, every kernel
// choice, and the int8 row quantisation of each GEMM's input alone ("quant").
void bench_moe_w4a8(Arena& arena, Stream& stream, const RandomPool& bf16_pool);

// FP8-block experts (quant/formats/fp8/cuda/moe_fp8_block.h): both kernels (the tile kernel at the
// model's tile height, and at decode the cp.async decode kernel) against the bf16 grouped GEMM, banks
// of random e4m3 codes with unit multipliers; T = 1, 8, 64, 512 (--tokens: others).
void bench_moe_fp8_block(Arena& arena, Stream& stream, const RandomPool& fp8_pool, const RandomPool& bf16_pool);

// GGUF routed experts (quant/formats/ggml/cuda/moe_ggml.h) of the formats `types`: the decode grouped
// GEMV (quantisation of the sorted rows included) at 2, 3 and 4 weight rows per warp, the
// quantisation alone, and from 512 tokens on the prefill GEMM (moe_grouped_gemm_ggml, both tile
// heights; "auto" marks the model's choice), banks of random bytes (the values do not change the
// kernels' work), T = 1, 8, 64 (--tokens: others); target >= 2.5 TB/s on the packed bytes of the
// experts hit at decode.
void bench_moe_ggml(Arena& arena, Stream& stream, const RandomPool& bf16_pool, const std::vector<GgmlType>& types);

// GGUF dense linears kept packed as a bank of one expert (bench_cuda_dense.cpp), Kimi-K3 shapes, Q4_0 /
// Q4_K / Q6_K / Q3_K: the decode GEMV (to 256 rows; with and without the quantisation,
// and at every slice size), the grouped prefill GEMM, the dequantise-then-cuBLASLt
// product (moe_ggml_dense_gemm) and cuBLASLt over bf16 weights; T = 8 … 4096 (--tokens: others).
void bench_ggml_dense(Arena& arena, Blas& blas, Stream& stream, const RandomPool& bf16_pool);

}  // namespace k3::cuda::bench
