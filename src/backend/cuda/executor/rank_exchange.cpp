#include "backend/cuda/executor/rank_exchange.h"

#include "backend/cuda/core/check.h"
#include "core/error.h"

namespace k3::cuda {

void RoutedSumAcrossRanks::all_reduce(const DeviceTensor& routed, cudaStream_t stream) {
  expect_dtype(routed, DType::kF32, "expert-parallel routed sum");
  if (!routed.contiguous()) throw Error("expert-parallel routed sum: needs contiguous rows, got " + routed.describe());
  host_.resize(static_cast<size_t>(routed.numel()));
  const size_t bytes = host_.size() * sizeof(float);
  K3_CUDA_CHECK(cudaMemcpyAsync(host_.data(), routed.data, bytes, cudaMemcpyDeviceToHost, stream));
  K3_CUDA_CHECK(cudaStreamSynchronize(stream));
  ranks_.all_reduce(host_, ReduceOp::kSum);
  K3_CUDA_CHECK(cudaMemcpyAsync(routed.data, host_.data(), bytes, cudaMemcpyHostToDevice, stream));
  K3_CUDA_CHECK(cudaStreamSynchronize(stream));  // host_ is reused by the next layer
}

void HeadsAcrossRanks::all_gather(const DeviceTensor& mine, const DeviceTensor& whole, int64_t unit, cudaStream_t stream) {
  if (mine.dtype != whole.dtype || mine.rows != whole.rows || unit <= 0 || whole.cols % unit != 0) {
    throw Error("tensor-parallel heads: cannot gather " + mine.describe() + " into " + whole.describe() + " in groups of " +
                std::to_string(unit));
  }
  const size_t elem = dtype_size(mine.dtype), rows = static_cast<size_t>(mine.rows);
  const size_t mine_row = static_cast<size_t>(mine.cols) * elem, whole_row = static_cast<size_t>(whole.cols) * elem;
  mine_.resize(rows * mine_row);
  whole_.resize(rows * whole_row);
  if (rows > 0 && mine_row > 0) {
    K3_CUDA_CHECK(cudaMemcpy2DAsync(mine_.data(), mine_row, mine.data, static_cast<size_t>(mine.ld) * elem, mine_row, rows,
                                    cudaMemcpyDeviceToHost, stream));
  }
  K3_CUDA_CHECK(cudaStreamSynchronize(stream));
  gather_column_groups(ranks_, mine_.data(), mine.rows, mine.cols, whole.cols, unit, elem, whole_.data());
  if (rows > 0 && whole_row > 0) {
    K3_CUDA_CHECK(cudaMemcpy2DAsync(whole.data, static_cast<size_t>(whole.ld) * elem, whole_.data(), whole_row, whole_row, rows,
                                    cudaMemcpyHostToDevice, stream));
  }
  K3_CUDA_CHECK(cudaStreamSynchronize(stream));  // whole_ is reused by the next layer
}

}  // namespace k3::cuda
