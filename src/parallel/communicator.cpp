#include "parallel/communicator.h"

#include "core/error.h"

namespace k3 {

void all_reduce_by_gathering(Communicator& c, std::span<float> data, ReduceOp op) {
  std::vector<float> all(data.size() * static_cast<size_t>(c.size()));
  c.all_gather(std::as_bytes(data), std::as_writable_bytes(std::span(all)));
  reduce_in_rank_order(all, c.size(), op, data);
}

void reduce_scatter_by_exchanging(Communicator& c, std::span<const float> send, std::span<float> recv, ReduceOp op) {
  if (send.size() != recv.size() * static_cast<size_t>(c.size())) {
    throw Error("reduce_scatter on rank " + std::to_string(c.rank()) + ": sends " + std::to_string(send.size()) +
                " values for " + std::to_string(c.size()) + " ranks of " + std::to_string(recv.size()));
  }
  // Block r of every rank goes to rank r; then each rank reduces its blocks in rank order.
  const std::vector<size_t> counts(static_cast<size_t>(c.size()), recv.size() * sizeof(float));
  std::vector<float> mine(send.size());
  c.all_to_all_v(std::as_bytes(send), counts, std::as_writable_bytes(std::span(mine)), counts);
  reduce_in_rank_order(mine, c.size(), op, recv);
}

}  // namespace k3
