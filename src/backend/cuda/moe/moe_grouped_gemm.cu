// Grouped bf16 GEMM over a MoE dispatch (moe.h): the mma.sync grouped GEMM of moe_grouped_gemm.cuh
// over a bf16 bank (weight tiles by cp.async).
#include "backend/cuda/moe/moe_grouped_gemm.cuh"
#include "backend/cuda/moe/moe_tiles.h"

namespace k3::cuda {

using namespace grouped_gemm;

void moe_grouped_gemm_bf16(const DeviceTensor& xs, const DeviceTensor& w, const MoeDispatch& d, const DeviceTensor& ys,
                           cudaStream_t stream, MoeTile tile) {
  const int64_t R = d.rows(), K = xs.cols, N = ys.cols;
  expect_dtype(xs, DType::kBF16, "moe_grouped_gemm_bf16 xs");
  expect_dtype(w, DType::kBF16, "moe_grouped_gemm_bf16 w");
  expect_shape(xs, R, K, "moe_grouped_gemm_bf16 xs");
  expect_shape(w, d.experts * N, K, "moe_grouped_gemm_bf16 w");
  expect_shape(ys, R, N, "moe_grouped_gemm_bf16 ys");
  if (K % 8 != 0 || N % 8 != 0 || K <= 0 || N <= 0) {
    throw Error("moe_grouped_gemm_bf16: needs N, K positive multiples of 8, got N " + std::to_string(N) + ", K " +
                std::to_string(K));
  }
  if (N > INT32_MAX / 2 || K > INT32_MAX / 2) throw Error("moe_grouped_gemm_bf16: N or K too large");
  for (const DeviceTensor* t : {&xs, &w, &ys}) {
    if (!rows_aligned16(*t)) throw Error("moe_grouped_gemm_bf16: needs 16-byte aligned rows, got " + t->describe());
  }
  if (tile == MoeTile::kAuto) tile = moe_tile_for(R, moe_choice_experts(d));
  const MoeTileMap map = moe_tile_map(d, tile);
  if (R == 0) return;
  const GemmArgs<Bf16Bank> a{xs.as<const bf16>(), xs.ld, {w.as<const bf16>(), w.ld}, ys.data, ys.ld, static_cast<int>(N),
                             static_cast<int>(K), 0, d.expert_offsets, nullptr, nullptr, d.row_weight};
  launch_tile(tile, a, map, ys, stream, "moe_grouped_gemm_bf16");
}

void moe_grouped_gemm_bf16(const DeviceTensor& xs, const DeviceTensor& w, const MoeDispatch& d, const DeviceTensor& ys,
                           cudaStream_t stream) {
  moe_grouped_gemm_bf16(xs, w, d, ys, stream, MoeTile::kAuto);
}

}  // namespace k3::cuda
