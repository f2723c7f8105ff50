// Collectives among the ranks of one model replica: the interface tensor and expert parallelism
// are written against. Implementations: in-process ranks (threads of one process sharing memory:
// thread_world.h), and across processes or GPUs the libraries the field trusts (MPI, NCCL).
//
// Contract: every rank calls the same collectives in the same order with matching sizes. A failure
// on any rank (an exception, abort(), a rank that stops calling) ends every rank's pending and later
// collectives with a k3::Error naming the cause, within the world's timeout — never a hang.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace k3 {

enum class ReduceOp { kSum, kMax };

// out[i] = op over the `ranks` blocks of `all` (each out.size() values), taken in rank order: the
// sums every Communicator promises, computed locally after an all-gather.
inline void reduce_in_rank_order(std::span<const float> all, int ranks, ReduceOp op, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = all[i];
  for (int q = 1; q < ranks; ++q) {
    const float* x = all.data() + static_cast<size_t>(q) * out.size();
    for (size_t i = 0; i < out.size(); ++i) out[i] = op == ReduceOp::kSum ? out[i] + x[i] : (x[i] > out[i] ? x[i] : out[i]);
  }
}

// A vector's elements as the bytes a collective sends or receives.
template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}
template <typename T>
std::span<std::byte> bytes_of(std::vector<T>& v) {
  return std::as_writable_bytes(std::span(v));
}

// Collectives over the device memory of a rank's GPU, for a GPU backend's ranks (NcclWorld).
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  // `bytes` at `send` from every rank concatenated in rank order at `recv` (device memory), after
  // the work queued on `stream` (a cudaStream_t of the rank's GPU) so far; returns when done, or
  // throws as the host collectives do.
  virtual void all_gather_device(const void* send, void* recv, size_t bytes, void* stream) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Element-wise over every rank's `data` (equal lengths); the result on every rank. A sum adds the
  // ranks' values in rank order (0, 1, …) on every rank: all ranks get the same bits, run after run.
  virtual void all_reduce(std::span<float> data, ReduceOp op) = 0;
  // `send` holds size() equal blocks; rank r receives block r reduced over the ranks (rank order).
  virtual void reduce_scatter(std::span<const float> send, std::span<float> recv, ReduceOp op) = 0;
  // recv = every rank's `send` (equal lengths) concatenated in rank order.
  virtual void all_gather(std::span<const std::byte> send, std::span<std::byte> recv) = 0;
  // `send` holds send_counts[r] bytes for each rank r, in rank order; recv receives recv_counts[q]
  // bytes from each rank q, in rank order. send_counts[r] on rank q must equal recv_counts[q] on r.
  virtual void all_to_all_v(std::span<const std::byte> send, std::span<const size_t> send_counts, std::span<std::byte> recv,
                            std::span<const size_t> recv_counts) = 0;
  // Every rank's `data` becomes root's.
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  // broadcast() whose non-root ranks wait for root without the world's timeout: a worker waiting
  // for its leader's next call while the leader is idle. A failure of the world still ends the wait.
  virtual void broadcast_untimed(std::span<std::byte> data, int root) = 0;
  virtual void barrier() = 0;
  // Marks the world failed: every rank's pending and later collectives throw, naming `reason`.
  virtual void abort(const std::string& reason) = 0;
  // The same ranks' collectives over GPU memory where this world has them; null: host memory only.
  virtual DeviceCollectives* device_collectives() { return nullptr; }
};

// all_reduce and reduce_scatter for communicators that move bytes but do not reduce in a fixed order:
// an all-gather (an all-to-all) of the values, then reduce_in_rank_order.
void all_reduce_by_gathering(Communicator& c, std::span<float> data, ReduceOp op);
void reduce_scatter_by_exchanging(Communicator& c, std::span<const float> send, std::span<float> recv, ReduceOp op);

// Columns divided among the ranks in groups of `unit` put back together: rank q holds the groups
// split_range(full_cols / unit, size, q) of every one of `rows` rows (its heads' or channels'
// values), `local_cols` elements of `elem_bytes` each per row at `local`; `out` receives every row
// whole ([rows, full_cols]) on every rank. Only moves bytes.
void gather_column_groups(Communicator& c, const std::byte* local, int64_t rows, int64_t local_cols, int64_t full_cols,
                          int64_t unit, size_t elem_bytes, std::byte* out);
// The columns every rank sends per row in that gather: the widest share of `groups` groups of `unit`
// among `ranks` (the narrower shares padded, so the all-gather's blocks have equal sizes).
inline int64_t gathered_share_columns(int64_t groups, int64_t ranks, int64_t unit) { return (groups + ranks - 1) / ranks * unit; }

}  // namespace k3
