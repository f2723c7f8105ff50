// GPU ranks over NCCL: one communicator per GPU, its unique id handed out by rank 0 through a
// bootstrap Communicator (MPI ranks under mpirun, or in-process ranks driving several GPUs of one
// process). The collectives take host spans, as the Communicator interface does, and stage them
// through device buffers on the rank's GPU, so the CPU backend's tensor- and expert-parallel path runs
// over NCCL unchanged; the CUDA executor's ranks hand it device buffers (DeviceCollectives).
//
// Numerics: sums are taken after an all-gather, locally and in rank order, so every rank gets the
// bits the other communicators give (NCCL's own reductions do not fix the order of additions).
//
// Failures: the communicator is non-blocking; every collective polls NCCL's asynchronous error and
// the stream against a deadline, and on a timeout or an error aborts the communicator
// (ncclCommAbort) and throws k3::Error naming the rank and the collective — a dead or stalled peer
// ends every rank within the timeout, never a hang.
#pragma once

#include <chrono>
#include <memory>

#include "parallel/communicator.h"

namespace k3 {

class NcclWorld final : public Communicator, public DeviceCollectives {
 public:
  // Collective over `bootstrap`: this process's rank and size are bootstrap's; the rank uses GPU
  // `device`. Throws k3::Error when CUDA or NCCL fails (naming the call and its error string).
  NcclWorld(Communicator& bootstrap, int device, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~NcclWorld() override;
  NcclWorld(const NcclWorld&) = delete;
  NcclWorld& operator=(const NcclWorld&) = delete;

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
  // Device buffers of this rank's GPU handed to NCCL as they are, on the world's stream behind
  // `stream`'s work; the same deadline and abort as the collectives above.
  DeviceCollectives* device_collectives() override { return this; }
  void all_gather_device(const void* send, void* recv, size_t bytes, void* stream) override;

 private:
  struct State;
  // Runs `issue` (NCCL calls on the rank's stream), waits until NCCL has put their work on the stream
  // (a non-blocking communicator may return before), runs `then` (the copies of the results) and
  // waits for the stream, as the header describes.
  template <typename Issue, typename Then>
  void run(const char* what, bool untimed, const Issue& issue, const Then& then);
  void broadcast_from(std::span<std::byte> data, int root, bool untimed);
  [[noreturn]] void fail(const std::string& why);

  std::unique_ptr<State> s_;
  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
};

}  // namespace k3
