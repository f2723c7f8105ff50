// The decode GEMV's host side (moe_ggml.h, moe_ggml_tuning.h): checks, the default rows per warp,
// slice and token chunk, and the launch of the kernel (moe_ggml_gemv.cuh) instantiated for that chunk.
#include <algorithm>
#include <string>

#include "backend/cuda/core/device.h"
#include "quant/formats/ggml/cuda/moe_ggml_gemv.cuh"
#include "quant/formats/ggml/cuda/moe_ggml_tuning.h"

namespace k3::cuda {

using namespace ggml_gemv;

namespace {

// The GEMV's checks (before anything is launched); the rows per warp and token chunk it runs at, the
// defaults filled in.
struct GemvChoice {
  int rows_per_warp, token_chunk;
};
GemvChoice check_gemv(const MoeGgmlActs& acts, const MoeGgmlBank& bank, const MoeDispatch& d, const DeviceTensor& ys,
                      int rows_per_warp, int token_chunk) {
  const int64_t R = d.rows(), N = bank.n, K = bank.k;
  moe_ggml_check_bank(bank, d, "moe_grouped_gemv_ggml");
  if (acts.rows != R || acts.k != K || acts.block != ggml_type_info(bank.type).block_size) {
    throw Error("moe_grouped_gemv_ggml: activations not laid out for " + std::to_string(R) + " rows of K " +
                std::to_string(K) + " in " + std::string(ggml_type_name(bank.type)) + " blocks");
  }
  expect_shape(ys, R, N, "moe_grouped_gemv_ggml ys");
  if (ys.dtype != DType::kF32 && ys.dtype != DType::kBF16) throw Error("moe_grouped_gemv_ggml: ys must be f32 or bf16");
  if (token_chunk == 0) token_chunk = moe_ggml_gemv_token_chunk(bank.type, R, bank.experts);
  if (token_chunk != 1 && token_chunk != 4) {
    throw Error("moe_grouped_gemv_ggml: token chunk must be 1 or 4, got " + std::to_string(token_chunk));
  }
  if (token_chunk == 1 && !moe_ggml_gemv_one_token(bank.type)) {
    throw Error("moe_grouped_gemv_ggml: no token chunk 1 for " + std::string(ggml_type_name(bank.type)) + " (q2_K only)");
  }
  if (rows_per_warp == 0) rows_per_warp = moe_ggml_gemv_rows_per_warp(bank.type, K, token_chunk);
  if (!moe_ggml_gemv_supports(bank.type, rows_per_warp)) {
    throw Error("moe_grouped_gemv_ggml: rows per warp must be 2, 3 or 4, got " + std::to_string(rows_per_warp));
  }
  return {rows_per_warp, token_chunk};
}

}  // namespace

bool moe_ggml_gemv_supports(GgmlType type, int rows_per_warp) {
  return gb::visit(type, [](auto) {}) &&
         (rows_per_warp == 2 || rows_per_warp == 3 || rows_per_warp == 4);
}

bool moe_ggml_gemv_one_token(GgmlType type) { return gemv_one_token_type(type); }

int moe_ggml_gemv_token_chunk(GgmlType type, int64_t rows, int64_t experts) {
  return gemv_one_token_type(type) && experts > 1 && rows * kGgmlGemvOneTokenExpertsPerRow <= experts ? 1 : 4;
}

int moe_ggml_gemv_slice_rows(int rows_per_warp, int64_t n, int64_t tile_bound, int multiprocessors, int token_chunk) {
  const int64_t group = kGemvWarps * rows_per_warp;  // one row group per warp
  const int64_t widest = gemv_cta_rows(rows_per_warp);
  // The fewest whole row groups per CTA at which n · tile_bound weight rows take at most one wave of
  // the residency's CTAs per SM (up to the rounding of each expert's last slice).
  const int64_t wave = gemv_ctas_per_sm(token_chunk) * static_cast<int64_t>(std::max(multiprocessors, 1));
  const int64_t groups = (n * tile_bound + wave * group - 1) / (wave * group);
  return static_cast<int>(std::clamp(groups * group, group, widest));
}

int moe_ggml_gemv_rows_per_warp(GgmlType type, int64_t k, int token_chunk) {
  int rw = 2;
  gb::visit(type, [&](auto trait) {
    using F = decltype(trait);
    for (int r : {4, 3, 2}) {
      if (geometry<F>(r, static_cast<int>(k), gemv_ring_bytes(token_chunk)).nblk == 1) {  // two ring stages of whole rows
        rw = r;
        return;
      }
    }
  });
  return rw;
}

void moe_grouped_gemv_ggml(const MoeGgmlActs& acts, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const DeviceTensor& ys, cudaStream_t stream, int rows_per_warp, int slice_rows,
                           int token_chunk) {
  const GemvChoice c = check_gemv(acts, bank, d, ys, rows_per_warp, token_chunk);
  const int64_t R = d.rows(), N = bank.n, K = bank.k;
  const MoeTileMap map = moe_tile_map(d, MoeTile::kM16);
  const int group = kGemvWarps * c.rows_per_warp;
  if (slice_rows == 0) {
    slice_rows = moe_ggml_gemv_slice_rows(c.rows_per_warp, N, map.bound, current_multiprocessors(), c.token_chunk);
  }
  if (slice_rows < group || slice_rows > gemv_cta_rows(c.rows_per_warp) || slice_rows % group != 0) {
    throw Error("moe_grouped_gemv_ggml: " + std::to_string(slice_rows) + " weight rows per CTA at " +
                std::to_string(c.rows_per_warp) + " rows per warp (a multiple of " + std::to_string(group) + " up to " +
                std::to_string(gemv_cta_rows(c.rows_per_warp)) + ")");
  }
  if (R == 0) return;
  const int64_t n_slices = (N + slice_rows - 1) / slice_rows;
  const int64_t blocks = n_slices * map.bound;
  if (blocks > INT32_MAX) throw Error("moe_grouped_gemv_ggml: grid too large");
  const GemvArgs a{bank.data, bank.data + bank.bytes(), bank.row_bytes(), acts, ys.data, ys.ld, static_cast<int>(N), static_cast<int>(K),
                   d.expert_offsets, d.row_weight, slice_rows};
  const bool f32_out = ys.dtype == DType::kF32;
  const auto grid = static_cast<unsigned>(blocks);
  const int slices = static_cast<int>(n_slices);
  if (c.token_chunk == 1) {
    gemv_launch<1>(bank.type, f32_out, c.rows_per_warp, a, slices, grid, map, stream);
  } else {
    gemv_launch<4>(bank.type, f32_out, c.rows_per_warp, a, slices, grid, map, stream);
  }
  K3_CUDA_CHECK_LAUNCH("moe_ggml gemv_kernel");
}

void moe_grouped_gemv_ggml(const DeviceTensor& xs, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const MoeGgmlActs& acts, const DeviceTensor& ys, cudaStream_t stream, int rows_per_warp,
                           int slice_rows, int token_chunk) {
  check_gemv(acts, bank, d, ys, rows_per_warp, token_chunk);
  moe_ggml_quantize(xs, acts, stream);
  moe_grouped_gemv_ggml(acts, bank, d, ys, stream, rows_per_warp, slice_rows, token_chunk);
}

void moe_grouped_gemv_ggml(const MoeGgmlActs& acts, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const DeviceTensor& ys, cudaStream_t stream) {
  moe_grouped_gemv_ggml(acts, bank, d, ys, stream, 0, 0, 0);
}

void moe_grouped_gemv_ggml(const DeviceTensor& xs, const MoeGgmlBank& bank, const MoeDispatch& d,
                           const MoeGgmlActs& acts, const DeviceTensor& ys, cudaStream_t stream) {
  moe_grouped_gemv_ggml(xs, bank, d, acts, ys, stream, 0, 0, 0);
}

}  // namespace k3::cuda
