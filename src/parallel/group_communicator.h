// A communicator over a group of consecutive ranks of a parent world (a tensor-parallel group inside
// an expert-parallel world). Every collective runs as one all-to-all of the parent that moves bytes
// only within groups, so every rank of the parent must make the same calls in the same order — true
// when the groups run the same layers over the same tokens. Sums and maxima are taken locally in
// group rank order, as the parent's own collectives take them.
#pragma once

#include <vector>

#include "parallel/communicator.h"

namespace k3 {

class GroupCommunicator final : public Communicator {
 public:
  // The group of `parent.rank()` among groups of `group_size` consecutive ranks (it must divide the
  // parent's size).
  GroupCommunicator(Communicator& parent, int group_size);

  int rank() const override { return parent_.rank() % size_; }
  int size() const override { return size_; }
  void all_reduce(std::span<float> data, ReduceOp op) override;
  void reduce_scatter(std::span<const float> send, std::span<float> recv, ReduceOp op) override;
  void all_gather(std::span<const std::byte> send, std::span<std::byte> recv) override;
  void all_to_all_v(std::span<const std::byte> send, std::span<const size_t> send_counts, std::span<std::byte> recv,
                    std::span<const size_t> recv_counts) override;
  void broadcast(std::span<std::byte> data, int root) override;
  // Timed: a group is never the world a worker waits on.
  void broadcast_untimed(std::span<std::byte> data, int root) override { broadcast(data, root); }
  void barrier() override { parent_.barrier(); }
  void abort(const std::string& reason) override { parent_.abort(reason); }

 private:
  // The parent's all-to-all with this group's counts at the group's parent ranks, zero elsewhere.
  void exchange(std::span<const std::byte> send, std::span<const size_t> send_counts, std::span<std::byte> recv,
                std::span<const size_t> recv_counts);

  Communicator& parent_;
  int size_, first_;  // group size; the parent rank of group rank 0
};

}  // namespace k3
