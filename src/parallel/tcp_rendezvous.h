// The start of ranks launched without mpirun (`k3 … --nnodes N --node-rank R --master-addr H
// --master-port P`), as torchrun's TCP store starts PyTorch's: rank 0 listens on H:P, every other rank
// connects to it, and the ranks exchange the few small values a start needs — the NCCL unique id,
// each rank's model fingerprint. It is a bootstrap Communicator for NcclWorld: broadcast, all_gather
// and barrier of at most kMaxRendezvousBytes per rank, relayed by rank 0. It refuses the model's
// collectives (all_reduce, reduce_scatter, all_to_all_v): those run over NCCL.
//
// Failures are one-line k3::Errors naming the address, the rank and what was missing: a rank that does
// not join within the timeout, a peer that closes or sends what is not a k3 rendezvous message, a
// world size that differs between ranks, a value over the limit. Never a hang: every wait has the
// timeout, except broadcast_untimed's, which still ends when a peer closes.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace k3 {

inline constexpr size_t kMaxRendezvousBytes = size_t{1} << 20;

class TcpRendezvous final : public Communicator {
 public:
  // Rank 0 listens on `address`:`port` and waits for the other size − 1 ranks; the others connect
  // (retrying until rank 0 listens). Returns when every rank has joined. Throws k3::Error (field
  // '--master-addr' or '--master-port' where the address is at fault).
  TcpRendezvous(const std::string& address, int port, int rank, int size, std::chrono::milliseconds timeout);
  ~TcpRendezvous() override;
  TcpRendezvous(const TcpRendezvous&) = delete;
  TcpRendezvous& operator=(const TcpRendezvous&) = delete;

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

  // Every rank's `mine` (lengths may differ), in rank order, on every rank.
  std::vector<std::vector<std::byte>> exchange(std::span<const std::byte> mine, bool untimed = false);

 private:
  void broadcast_from(std::span<std::byte> data, int root, bool untimed);
  [[noreturn]] void refuse(const char* collective);
  [[noreturn]] void fail(const std::string& why);
  void close_all();

  std::string where_;  // "rendezvous at H:P, rank r of n"
  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
  int listener_ = -1;
  std::vector<int> peers_;  // rank 0: the socket of rank q at q (−1 at 0); others: rank 0's at 0
  bool failed_ = false;
};

}  // namespace k3
