// FP8-block routed experts on the GPU (compressed-tensors / DeepSeek FP8-block releases): e4m3 codes
// with one f32 multiplier per 128×128 block kept in GPU memory as stored, multiplied by the mma.sync
// grouped GEMM of the bf16 experts (moe_grouped_gemm.cuh) with its weight tiles decoded on the way
// into shared memory: bf16(e4m3 · multiplier), rounded to nearest even from the f32 product — the
// values the uploader's dequantise-to-bf16 path stores, so the results are those of the bf16 bank
// bit for bit, from half its bytes. Activations bf16, fp32 accumulation.
//
// Layout: bank row e·N + n is weight row n of expert e, K codes (rows back to back, experts back to
// back); multipliers f32 [E·N/128, ⌈K/128⌉], row b for bank rows [128·b, 128·b + 128). N % 128 == 0
// (an expert's blocks never straddle two experts, and a stacked [w1 | w3] bank keeps each half's),
// K % 8 == 0. Upload is a plain copy of each expert's codes and multipliers.
//
// Graph-capturable: grids sized from the dispatch's bounds, idle CTAs exit. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/tensor.h"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/moe/moe_tiles.h"

namespace k3::cuda {

inline constexpr int64_t kFp8ExpertBlock = 128;  // rows and columns per multiplier

struct MoeFp8BlockBank {
  int64_t experts = 0, n = 0, k = 0;
  uint8_t* codes = nullptr;  // e4m3 [E·N, K]
  float* scales = nullptr;   // [E·N/128, ⌈K/128⌉]

  int64_t rows() const { return experts * n; }
  int64_t scale_cols() const { return (k + kFp8ExpertBlock - 1) / kFp8ExpertBlock; }
  size_t code_bytes() const { return static_cast<size_t>(rows() * k); }
  size_t scale_bytes() const { return static_cast<size_t>(rows() / kFp8ExpertBlock * scale_cols()) * sizeof(float); }
};

// Throws (naming `what`) unless E, N, K > 0, N % 128 == 0, K % 8 == 0 and N, K fit the kernels.
void moe_fp8_block_check_shape(int64_t experts, int64_t n, int64_t k, const char* what);
// A bank's device memory from the arena (contents undefined until uploaded).
MoeFp8BlockBank moe_fp8_block_alloc(Arena& arena, int64_t experts, int64_t n, int64_t k, const char* what);
// Copies `rows` rows (rows % 128 == 0) of codes [rows, K] and their multipliers [rows/128, ⌈K/128⌉],
// as stored, to bank rows [row0, row0 + rows) (row0 % 128 == 0).
void moe_fp8_block_upload_rows(const MoeFp8BlockBank& bank, int64_t row0, const uint8_t* codes, const float* scales,
                               int64_t rows);

// The kernels: kTile, the grouped GEMM's tile kernel at the tile height, its threads decoding the
// codes they load; kDecode, at tile height kM16 only, the codes streamed into shared memory by
// cp.async and decoded there (moe_fp8_block_decode.cu; K % 16 == 0). Both give the same bits.
// kAuto: kDecode where the tile is kM16 and it fits, else kTile.
enum class Fp8ExpertKernel : uint8_t { kAuto, kTile, kDecode };

// Grouped GEMM over the dispatch: ys[r] = xs[r] · W_eᵀ for the sorted rows r of each expert e, W_e the
// bank's expert e dequantised to bf16 as above. xs bf16 [R, K]; ys f32 or bf16 [R, N] (times the
// dispatch's row_weight where set); rows 16-byte aligned. The tile height follows moe_tile_for (kAuto).
void moe_grouped_gemm_fp8_block(const DeviceTensor& xs, const MoeFp8BlockBank& bank, const MoeDispatch& d,
                                const DeviceTensor& ys, cudaStream_t stream, MoeTile tile = MoeTile::kAuto,
                                Fp8ExpertKernel kernel = Fp8ExpertKernel::kAuto);

}  // namespace k3::cuda
