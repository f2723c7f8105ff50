#include "backend/cuda/executor/expert_ranks.h"

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

}  // namespace k3::cuda
