// What the CUDA backend's ranks exchange within a forward step, over any Communicator: in device
// memory where it has DeviceCollectives (NCCL), else staged through host memory (in-process ranks,
// MPI). The step waits for each exchange, so decode CUDA graphs are off on ranks. Every rank runs the
// same forward pass over the same tokens, and both ways give the same bits.
//   Expert parallelism: each rank's GPU holds its share of every MoE layer's routed experts (an
//   ExpertSubset: split_range of the experts over the ranks) and computes the picks of its experts
//   only; the partial routed sums are summed over the ranks — before the latent norm, which is not
//   additive (spec §7.2). Summed in rank order, every rank gets the same bits.
//   Attention tensor parallelism: each rank holds its share of the KDA and MLA heads
//   (device_weights.h HeadShare); their outputs are all-gathered before o_proj, which every rank
//   holds whole: the values are only moved, so o_proj sees the one-rank input.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/tensor.h"
#include "parallel/communicator.h"

namespace k3::cuda {

class RoutedSumAcrossRanks {
 public:
  explicit RoutedSumAcrossRanks(Communicator& ranks) : ranks_(ranks) {}
  Communicator& ranks() const { return ranks_; }
  // routed (f32 [T, D], contiguous) = Σ over the ranks of their `routed`, added in rank order;
  // device scratch from `arena` (given back); waits for `stream`.
  void all_reduce(const DeviceTensor& routed, Arena& arena, cudaStream_t stream);

 private:
  Communicator& ranks_;
  std::vector<float> host_;
};

class HeadsAcrossRanks {
 public:
  explicit HeadsAcrossRanks(Communicator& ranks) : ranks_(ranks) {}
  Communicator& ranks() const { return ranks_; }
  // whole [T, C] = every rank's `mine` [T, its groups of `unit` columns] side by side, in head order
  // (communicator.h gather_column_groups); same dtype; device scratch from `arena` (given back);
  // waits for `stream`.
  void all_gather(const DeviceTensor& mine, const DeviceTensor& whole, int64_t unit, Arena& arena, cudaStream_t stream);

 private:
  Communicator& ranks_;
  std::vector<std::byte> mine_, whole_;
};

}  // namespace k3::cuda
