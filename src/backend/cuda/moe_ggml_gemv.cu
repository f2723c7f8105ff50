// The GGUF experts' decode grouped GEMV (moe_ggml.h, moe_grouped_gemv_ggml), one template over the
// block traits of moe_ggml_blocks.h and the weight rows a warp streams at once.
//
// CTA → (tile of ≤ 16 sorted rows of one expert, kGemvRows weight rows) as in moe_w4_gemm.cuh: an
// expert's token tiles run back to back for each slice of weight rows, so a slice comes from DRAM once
// while the expert's tiles go by. A warp takes RW weight rows at once (RW × the bytes in flight of one
// row: at decode the kernel is bound by how many bytes each SM has in flight); lane l takes part
// l % kParts of block l / kParts of each 1024-element step, and the next step's weights are loaded
// before the current one is multiplied. The tile's tokens go by in chunks of kTokenChunk with their
// accumulators in registers (decode tiles hold 1–3 tokens; a chunk after the first re-reads the rows,
// from L1/L2).
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/moe_ggml.h"
#include "backend/cuda/moe_ggml_blocks.h"
#include "backend/cuda/moe_tile.cuh"

namespace k3::cuda {
namespace {

namespace gb = ggml_blocks;
using detail::bf16;

constexpr int kGemvWarps = 8;
constexpr int kGemvRows = 128;    // weight rows per CTA
constexpr int kGemvTokens = 16;   // the kM16 tile map's height
constexpr int kTokenChunk = 4;    // accumulators per weight row held at once

struct GemvArgs {
  const uint8_t* w;
  int64_t row_bytes;
  MoeGgmlActs x;
  void* y;
  int64_t ldy;
  int n, k;
  const int32_t* offsets;
};

__device__ __forceinline__ void store_out(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_out(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

template <class F, typename Tout, int RW>
__global__ void __launch_bounds__(kGemvWarps * 32, 2) gemv_kernel(GemvArgs a, int n_slices,
                                                               const int32_t* __restrict__ tile_count,
                                                               const int4* __restrict__ tiles) {
  constexpr int kPerStep = 32 / F::kParts;  // blocks per warp step
  detail::MoeCtaTile ct;
  if (!detail::moe_cta_tile(n_slices, kGemvTokens, kGemvRows, tile_count, tiles, a.offsets, ct)) return;
  const int expert = ct.expert, r0 = ct.row0, rows = ct.rows, n0 = ct.col0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = lane % F::kParts, lb = lane / F::kParts;
  const int nb = a.k / F::kBlock, steps = (nb + kPerStep - 1) / kPerStep;
  const int ab = a.k / F::kBlock;  // activation blocks per row (the activation block is the weight block)

  for (int f0 = n0 + warp * RW; f0 < min(n0 + kGemvRows, a.n); f0 += kGemvWarps * RW) {
    const uint8_t* wr[RW];
#pragma unroll
    for (int i = 0; i < RW; ++i) wr[i] = a.w + (static_cast<int64_t>(expert) * a.n + min(f0 + i, a.n - 1)) * a.row_bytes;
    for (int t0 = 0; t0 < rows; t0 += kTokenChunk) {
      float acc[RW][kTokenChunk];
#pragma unroll
      for (int i = 0; i < RW; ++i) {
#pragma unroll
        for (int t = 0; t < kTokenChunk; ++t) acc[i][t] = 0.0f;
      }
      typename F::W next[RW];
      if (lb < nb) {
#pragma unroll
        for (int i = 0; i < RW; ++i) next[i] = F::load(wr[i] + static_cast<int64_t>(lb) * F::kBytes, part);
      }
      for (int s = 0; s < steps; ++s) {
        const int b = s * kPerStep + lb;
        typename F::W cur[RW];
#pragma unroll
        for (int i = 0; i < RW; ++i) cur[i] = next[i];
        if (b + kPerStep < nb) {
#pragma unroll
          for (int i = 0; i < RW; ++i) next[i] = F::load(wr[i] + static_cast<int64_t>(b + kPerStep) * F::kBytes, part);
        }
        if (b >= nb) continue;
#pragma unroll
        for (int t = 0; t < kTokenChunk; ++t) {
          if (t0 + t >= rows) break;
          const int64_t xr = r0 + t0 + t;
          const gb::ActBlock x{a.x.q + xr * a.k + static_cast<int64_t>(b) * F::kBlock,
                               a.x.sums + xr * (a.k / 16) + static_cast<int64_t>(b) * (F::kBlock / 16),
                               a.x.scale[xr * ab + b]};
#pragma unroll
          for (int i = 0; i < RW; ++i) acc[i][t] += F::dot(cur[i], part, x);
        }
      }
#pragma unroll
      for (int t = 0; t < kTokenChunk; ++t) {
        if (t0 + t >= rows) break;
#pragma unroll
        for (int i = 0; i < RW; ++i) {
          const float v = detail::warp_sum(acc[i][t]);
          if (lane == 0 && f0 + i < a.n) store_out(static_cast<Tout*>(a.y) + (r0 + t0 + t) * a.ldy + f0 + i, v);
        }
      }
    }
  }
}

template <int RW>
void launch(GgmlType type, bool f32_out, const GemvArgs& a, int n_slices, unsigned blocks, const MoeTileMap& map,
            cudaStream_t stream) {
  const auto* tiles = reinterpret_cast<const int4*>(map.tiles);
  gb::visit(type, [&](auto trait) {
    using F = decltype(trait);
    if (f32_out) {
      gemv_kernel<F, float, RW><<<blocks, kGemvWarps * 32, 0, stream>>>(a, n_slices, map.count, tiles);
    } else {
      gemv_kernel<F, bf16, RW><<<blocks, kGemvWarps * 32, 0, stream>>>(a, n_slices, map.count, tiles);
    }
  });
}

}  // namespace

int moe_ggml_gemv_rows_per_warp(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q2_K: return 4;
    default: return 2;
  }
}

void moe_grouped_gemv_ggml(const DeviceTensor& xs, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const MoeGgmlActs& acts, const DeviceTensor& ys, cudaStream_t stream, int rows_per_warp) {
  const int64_t R = d.rows(), N = bank.n, K = bank.k;
  moe_ggml_check_shape(bank.type, bank.experts, N, K, "moe_grouped_gemv_ggml");
  if (bank.data == nullptr) throw Error("moe_grouped_gemv_ggml: empty bank");
  if (bank.experts != d.experts) {
    throw Error("moe_grouped_gemv_ggml: bank has " + std::to_string(bank.experts) + " experts, dispatch " +
                std::to_string(d.experts));
  }
  if (acts.rows != R || acts.k != K || acts.block != ggml_type_info(bank.type).block_size) {
    throw Error("moe_grouped_gemv_ggml: activations not laid out for " + std::to_string(R) + " rows of K " +
                std::to_string(K) + " in " + std::string(ggml_type_name(bank.type)) + " blocks");
  }
  expect_shape(ys, R, N, "moe_grouped_gemv_ggml ys");
  if (ys.dtype != DType::kF32 && ys.dtype != DType::kBF16) throw Error("moe_grouped_gemv_ggml: ys must be f32 or bf16");
  if (rows_per_warp == 0) rows_per_warp = moe_ggml_gemv_rows_per_warp(bank.type);
  if (rows_per_warp != 1 && rows_per_warp != 2 && rows_per_warp != 4) {
    throw Error("moe_grouped_gemv_ggml: rows_per_warp must be 1, 2 or 4, got " + std::to_string(rows_per_warp));
  }
  moe_ggml_quantize(xs, acts, stream);
  const MoeTileMap map = moe_tile_map(d, MoeTile::kM16);
  if (R == 0) return;
  const int n_slices = static_cast<int>((N + kGemvRows - 1) / kGemvRows);
  const int64_t blocks = n_slices * map.bound;
  if (blocks > INT32_MAX) throw Error("moe_grouped_gemv_ggml: grid too large");
  const GemvArgs a{bank.data, bank.row_bytes(), acts, ys.data, ys.ld, static_cast<int>(N), static_cast<int>(K),
                   d.expert_offsets};
  const bool f32_out = ys.dtype == DType::kF32;
  const auto grid = static_cast<unsigned>(blocks);
  if (rows_per_warp == 1) launch<1>(bank.type, f32_out, a, n_slices, grid, map, stream);
  if (rows_per_warp == 2) launch<2>(bank.type, f32_out, a, n_slices, grid, map, stream);
  if (rows_per_warp == 4) launch<4>(bank.type, f32_out, a, n_slices, grid, map, stream);
  K3_CUDA_CHECK_LAUNCH("moe_ggml gemv_kernel");
}

}  // namespace k3::cuda
