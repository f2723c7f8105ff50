#include "parallel/group_communicator.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace k3 {

GroupCommunicator::GroupCommunicator(Communicator& parent, int group_size)
    : parent_(parent), size_(group_size), first_(parent.rank() / std::max(1, group_size) * std::max(1, group_size)) {
  if (group_size < 1 || parent.size() % group_size != 0) {
    throw Error(Where{"", "", "group size"}, std::to_string(group_size) + " does not divide the " +
                                                 std::to_string(parent.size()) + " ranks of the world");
  }
}

void GroupCommunicator::exchange(std::span<const std::byte> send, std::span<const size_t> send_counts,
                                 std::span<std::byte> recv, std::span<const size_t> recv_counts) {
  std::vector<size_t> to(static_cast<size_t>(parent_.size()), 0), from(to.size(), 0);
  std::copy(send_counts.begin(), send_counts.end(), to.begin() + first_);
  std::copy(recv_counts.begin(), recv_counts.end(), from.begin() + first_);
  parent_.all_to_all_v(send, to, recv, from);
}

void GroupCommunicator::all_to_all_v(std::span<const std::byte> send, std::span<const size_t> send_counts,
                                     std::span<std::byte> recv, std::span<const size_t> recv_counts) {
  if (send_counts.size() != static_cast<size_t>(size_) || recv_counts.size() != static_cast<size_t>(size_)) {
    throw Error("group all_to_all_v: counts must have one entry per group rank");
  }
  exchange(send, send_counts, recv, recv_counts);
}

void GroupCommunicator::all_gather(std::span<const std::byte> send, std::span<std::byte> recv) {
  if (recv.size() != send.size() * static_cast<size_t>(size_)) throw Error("group all_gather: recv must hold every rank's send");
  std::vector<std::byte> copies(recv.size());
  for (int q = 0; q < size_; ++q) {
    if (!send.empty()) std::memcpy(copies.data() + static_cast<size_t>(q) * send.size(), send.data(), send.size());
  }
  const std::vector<size_t> counts(static_cast<size_t>(size_), send.size());
  exchange(copies, counts, recv, counts);
}

void GroupCommunicator::all_reduce(std::span<float> data, ReduceOp op) { all_reduce_by_gathering(*this, data, op); }

void GroupCommunicator::reduce_scatter(std::span<const float> send, std::span<float> recv, ReduceOp op) {
  reduce_scatter_by_exchanging(*this, send, recv, op);
}

void GroupCommunicator::broadcast(std::span<std::byte> data, int root) {
  if (root < 0 || root >= size_) throw Error("group broadcast: root " + std::to_string(root) + " is outside the group");
  std::vector<size_t> to(static_cast<size_t>(size_), rank() == root ? data.size() : 0), from(to.size(), 0);
  from[static_cast<size_t>(root)] = data.size();
  std::vector<std::byte> copies(rank() == root ? data.size() * static_cast<size_t>(size_) : 0), got(data.size());
  for (int q = 0; q < size_ && rank() == root; ++q) {
    if (!data.empty()) std::memcpy(copies.data() + static_cast<size_t>(q) * data.size(), data.data(), data.size());
  }
  exchange(copies, to, got, from);
  std::copy(got.begin(), got.end(), data.begin());
}

}  // namespace k3
