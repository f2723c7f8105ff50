#include "parallel/communicator.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/sharding.h"

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

void gather_column_groups(Communicator& c, const std::byte* local, int64_t rows, int64_t local_cols, int64_t full_cols,
                          int64_t unit, size_t elem_bytes, std::byte* out) {
  const int64_t n = c.size(), groups = full_cols / unit;
  const size_t widest = static_cast<size_t>(gathered_share_columns(groups, n, unit)) * elem_bytes;
  const size_t have = static_cast<size_t>(local_cols) * elem_bytes;
  const size_t row_bytes = static_cast<size_t>(full_cols) * elem_bytes;
  std::vector<std::byte> padded(static_cast<size_t>(rows) * widest), all(padded.size() * static_cast<size_t>(n));
  for (int64_t t = 0; t < rows; ++t) std::copy_n(local + t * have, have, &padded[static_cast<size_t>(t) * widest]);
  c.all_gather(padded, all);
  for (int64_t q = 0; q < n; ++q) {
    const IndexRange part = split_range(groups, n, q);
    const size_t first = static_cast<size_t>(part.first * unit) * elem_bytes, count = static_cast<size_t>(part.count * unit) * elem_bytes;
    const std::byte* from = &all[static_cast<size_t>(q) * padded.size()];
    for (int64_t t = 0; t < rows; ++t) std::copy_n(from + t * widest, count, out + t * row_bytes + first);
  }
}

}  // namespace k3
