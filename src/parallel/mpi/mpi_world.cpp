#include "parallel/mpi/mpi_world.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/error.h"

namespace k3 {
namespace {

int checked_int(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX)) throw Error(Where{"", "", what}, "over 2 GiB in one collective");
  return static_cast<int>(n);
}

}  // namespace

bool MpiWorld::launched() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

MpiWorld::MpiWorld(std::chrono::milliseconds timeout) : timeout_(timeout) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiWorld::~MpiWorld() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (failed_) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
}

void MpiWorld::fail(const std::string& why) {
  failed_ = true;
  throw Error("parallel world failed: " + why);
}

void MpiWorld::abort(const std::string& reason) {
  failed_ = true;
  (void)reason;  // the caller prints it; MPI_Abort ends every rank of the job
  MPI_Abort(MPI_COMM_WORLD, 1);
}

void MpiWorld::wait(void* handle, const char* what, bool untimed) {
  if (failed_) fail("an earlier collective failed");
  MPI_Request* request = static_cast<MPI_Request*>(handle);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto pause = std::chrono::microseconds(1);
  while (true) {
    int done = 0;
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (!untimed && std::chrono::steady_clock::now() > deadline) {
      fail("rank " + std::to_string(rank_) + " waited " + std::to_string(timeout_.count()) + " ms in " + what +
           " for the other ranks");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

void MpiWorld::all_reduce(std::span<float> data, ReduceOp op) { all_reduce_by_gathering(*this, data, op); }

void MpiWorld::reduce_scatter(std::span<const float> send, std::span<float> recv, ReduceOp op) {
  reduce_scatter_by_exchanging(*this, send, recv, op);
}

void MpiWorld::all_gather(std::span<const std::byte> send, std::span<std::byte> recv) {
  if (recv.size() != send.size() * static_cast<size_t>(size_)) {
    fail("all_gather on rank " + std::to_string(rank_) + ": receives " + std::to_string(recv.size()) + " bytes for " +
         std::to_string(size_) + " ranks of " + std::to_string(send.size()));
  }
  // The ranks' sizes first: a mismatch is an error on every rank, not undefined behaviour.
  std::vector<uint64_t> sizes(static_cast<size_t>(size_));
  const uint64_t mine = send.size();
  MPI_Request request;
  MPI_Iallgather(&mine, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD, &request);
  wait(&request, "all_gather");
  for (int q = 0; q < size_; ++q) {
    if (sizes[static_cast<size_t>(q)] != mine) {
      fail("all_gather on rank " + std::to_string(rank_) + ": rank " + std::to_string(q) + " has " +
           std::to_string(sizes[static_cast<size_t>(q)]) + " bytes, rank " + std::to_string(rank_) + " " + std::to_string(mine));
    }
  }
  const int n = checked_int(send.size(), "all_gather");
  MPI_Iallgather(send.data(), n, MPI_BYTE, recv.data(), n, MPI_BYTE, MPI_COMM_WORLD, &request);
  wait(&request, "all_gather");
}

void MpiWorld::all_to_all_v(std::span<const std::byte> send, std::span<const size_t> send_counts, std::span<std::byte> recv,
                            std::span<const size_t> recv_counts) {
  const size_t n = static_cast<size_t>(size_);
  if (send_counts.size() != n || recv_counts.size() != n) fail("all_to_all_v: counts must have one entry per rank");
  std::vector<int> sc(n), sd(n), rc(n), rd(n);
  size_t s_at = 0, r_at = 0;
  for (size_t q = 0; q < n; ++q) {
    sc[q] = checked_int(send_counts[q], "all_to_all_v");
    rc[q] = checked_int(recv_counts[q], "all_to_all_v");
    sd[q] = checked_int(s_at, "all_to_all_v");
    rd[q] = checked_int(r_at, "all_to_all_v");
    s_at += send_counts[q];
    r_at += recv_counts[q];
  }
  if (s_at != send.size() || r_at != recv.size()) fail("all_to_all_v: counts do not add up to the buffers");
  // Every pair agrees on its byte count first (what q sends to r is what r expects from q).
  std::vector<uint64_t> offered(send_counts.begin(), send_counts.end()), announced(n);
  MPI_Request request;
  MPI_Ialltoall(offered.data(), 1, MPI_UINT64_T, announced.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD, &request);
  wait(&request, "all_to_all_v");
  for (size_t q = 0; q < n; ++q) {
    if (announced[q] != recv_counts[q]) {
      fail("all_to_all_v on rank " + std::to_string(rank_) + ": rank " + std::to_string(q) +
           " sends a different byte count than rank " + std::to_string(rank_) + " expects");
    }
  }
  MPI_Ialltoallv(send.data(), sc.data(), sd.data(), MPI_BYTE, recv.data(), rc.data(), rd.data(), MPI_BYTE, MPI_COMM_WORLD,
                 &request);
  wait(&request, "all_to_all_v");
}

void MpiWorld::broadcast(std::span<std::byte> data, int root) {
  if (root < 0 || root >= size_) fail("broadcast: root " + std::to_string(root) + " is not a rank");
  MPI_Request request;
  MPI_Ibcast(data.data(), checked_int(data.size(), "broadcast"), MPI_BYTE, root, MPI_COMM_WORLD, &request);
  wait(&request, "broadcast");
}

void MpiWorld::broadcast_untimed(std::span<std::byte> data, int root) {
  if (root < 0 || root >= size_) fail("broadcast: root " + std::to_string(root) + " is not a rank");
  MPI_Request request;
  MPI_Ibcast(data.data(), checked_int(data.size(), "broadcast"), MPI_BYTE, root, MPI_COMM_WORLD, &request);
  wait(&request, "broadcast", rank_ != root);
}

void MpiWorld::barrier() {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  wait(&request, "barrier");
}

}  // namespace k3
