// Expert parallelism on the CUDA backend: each rank's GPU holds its share of every MoE layer's routed
// experts (an ExpertSubset: split_range of the experts over the ranks) and runs the same forward pass
// over the same tokens as the others (attention, dense layers, shared experts and the lm_head
// replicated). A rank's GPU pass computes the picks of its experts only; the partial routed sums are
// then summed over the ranks — before the latent norm, which is not additive (spec §7.2).
//
// The sum goes through host memory over any Communicator (in-process ranks, MPI): the step waits
// for it, so decode CUDA graphs are off. Summed in rank order, every rank gets the same bits.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "backend/cuda/core/tensor.h"
#include "parallel/communicator.h"

namespace k3::cuda {

class RoutedSumAcrossRanks {
 public:
  explicit RoutedSumAcrossRanks(Communicator& ranks) : ranks_(ranks) {}
  Communicator& ranks() const { return ranks_; }
  // routed (f32 [T, D], contiguous) = Σ over the ranks of their `routed`; waits for `stream`.
  void all_reduce(const DeviceTensor& routed, cudaStream_t stream);

 private:
  Communicator& ranks_;
  std::vector<float> host_;
};

}  // namespace k3::cuda
