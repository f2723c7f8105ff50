// Ranks in separate processes started by `mpirun`: MPI bootstraps the world and carries the
// collectives of CPU ranks (GPU ranks use NCCL, with MPI only for the bootstrap). Every wait polls
// with a deadline, so a rank that stops calling fails the others within the timeout; a rank that
// dies is reported by mpirun, which then ends the job. Sums are done locally in rank order after
// gathering the ranks' values, so every rank gets the same bits as with in-process ranks. MPI is
// called from one thread at a time, not necessarily the main one (MPI_THREAD_SERIALIZED: a server
// runs its engine on a scheduler thread).
#pragma once

#include <chrono>

#include "parallel/communicator.h"

namespace k3 {

class MpiWorld final : public Communicator {
 public:
  // Whether this process was started by mpirun (its environment names a world).
  static bool launched();
  // Initializes MPI (once per process).
  explicit MpiWorld(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Finalizes MPI; after a failure it aborts the job instead (MPI_Finalize would wait for the
  // failed collective), so report a failure before the world is destroyed.
  ~MpiWorld() override;
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce(std::span<float> data, ReduceOp op) override;
  void reduce_scatter(std::span<const float> send, std::span<float> recv, ReduceOp op) override;
  void all_gather(std::span<const std::byte> send, std::span<std::byte> recv) override;
  void all_to_all_v(std::span<const std::byte> send, std::span<const size_t> send_counts, std::span<std::byte> recv,
                    std::span<const size_t> recv_counts) override;
  void broadcast(std::span<std::byte> data, int root) override;
  void broadcast_untimed(std::span<std::byte> data, int root) override;
  void barrier() override;
  void abort(const std::string& reason) override;

 private:
  // Waits for the request `handle` (an MPI_Request) until the deadline; fails the world on timeout.
  // Untimed: waits until it completes (a dead rank is ended by mpirun with the job).
  void wait(void* handle, const char* what, bool untimed = false);
  [[noreturn]] void fail(const std::string& why);

  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
  bool failed_ = false;
};

}  // namespace k3
