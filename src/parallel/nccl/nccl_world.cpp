#include "parallel/nccl/nccl_world.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"

namespace k3 {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("NCCL world: ") + what + ": " + cudaGetErrorString(e));
}

// A device buffer that grows to the largest size asked of it.
struct DeviceBuffer {
  void* data = nullptr;
  size_t capacity = 0;
  std::byte* at_least(size_t bytes) {
    if (bytes > capacity) {
      if (data) cudaFree(data);
      data = nullptr;
      capacity = 0;
      check_cuda(cudaMalloc(&data, std::max<size_t>(bytes, 256)), "cudaMalloc");
      capacity = std::max<size_t>(bytes, 256);
    }
    return static_cast<std::byte*>(data);
  }
  ~DeviceBuffer() {
    if (data) cudaFree(data);
  }
};

}  // namespace

struct NcclWorld::State {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  DeviceBuffer send, recv;
  cudaEvent_t queued = nullptr;  // all_gather_device: the caller's stream work before the collective
  bool failed = false;
};

NcclWorld::NcclWorld(Communicator& bootstrap, int device, std::chrono::milliseconds timeout)
    : s_(std::make_unique<State>()), timeout_(timeout), rank_(bootstrap.rank()), size_(bootstrap.size()) {
  s_->device = device;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  check_cuda(cudaStreamCreateWithFlags(&s_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  ncclUniqueId id{};
  if (rank_ == 0 && ncclGetUniqueId(&id) != ncclSuccess) {
    bootstrap.abort("ncclGetUniqueId failed");
    fail("ncclGetUniqueId failed");
  }
  bootstrap.broadcast(std::as_writable_bytes(std::span(&id, 1)), 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait below polls against the deadline
  run("ncclCommInitRank", false, [&] { return ncclCommInitRankConfig(&s_->comm, size_, id, rank_, &config); }, [] {});
}

NcclWorld::~NcclWorld() {
  if (s_->comm) {
    if (s_->failed || ncclCommFinalize(s_->comm) != ncclSuccess) {
      ncclCommAbort(s_->comm);
    } else {
      ncclResult_t state = ncclInProgress;
      const auto deadline = std::chrono::steady_clock::now() + timeout_;
      while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) ncclCommGetAsyncError(s_->comm, &state);
      if (state == ncclSuccess) {
        ncclCommDestroy(s_->comm);
      } else {
        ncclCommAbort(s_->comm);
      }
    }
  }
  if (s_->queued) cudaEventDestroy(s_->queued);
  if (s_->stream) cudaStreamDestroy(s_->stream);
}

void NcclWorld::fail(const std::string& why) {
  s_->failed = true;
  throw Error("parallel world failed: " + why);
}

void NcclWorld::abort(const std::string& reason) {
  (void)reason;  // the caller reports it
  s_->failed = true;
  if (s_->comm) ncclCommAbort(s_->comm);
  s_->comm = nullptr;
}

template <typename Issue, typename Then>
void NcclWorld::run(const char* what, bool untimed, const Issue& issue, const Then& then) {
  if (s_->failed) fail("an earlier collective failed");
  check_cuda(cudaSetDevice(s_->device), "cudaSetDevice");
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto pause = std::chrono::microseconds(1);
  const auto give_up = [&](const std::string& why) {
    if (s_->comm) ncclCommAbort(s_->comm);
    s_->comm = nullptr;
    fail("rank " + std::to_string(rank_) + " " + why + " in " + what);
  };
  const auto tick = [&] {
    if (!untimed && std::chrono::steady_clock::now() > deadline) {
      give_up("waited " + std::to_string(timeout_.count()) + " ms for the other ranks");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  };
  ncclResult_t r = issue();
  while (r == ncclInProgress) {  // a non-blocking call whose work is not on the stream yet
    tick();
    ncclCommGetAsyncError(s_->comm, &r);
  }
  if (r != ncclSuccess) give_up(std::string("got NCCL error '") + ncclGetErrorString(r) + "'");
  then();  // stream work that reads NCCL's results goes behind it only now
  while (true) {
    const cudaError_t q = cudaStreamQuery(s_->stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) give_up(std::string("got CUDA error '") + cudaGetErrorString(q) + "'");
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(s_->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) give_up(std::string("got NCCL error '") + ncclGetErrorString(async) + "'");
    tick();
  }
}

void NcclWorld::all_gather(std::span<const std::byte> send, std::span<std::byte> recv) {
  if (recv.size() != send.size() * static_cast<size_t>(size_)) {
    fail("all_gather on rank " + std::to_string(rank_) + ": receives " + std::to_string(recv.size()) + " bytes for " +
         std::to_string(size_) + " ranks of " + std::to_string(send.size()));
  }
  // The ranks' sizes first: a mismatch is an error on every rank, not undefined behaviour.
  const uint64_t mine = send.size();
  std::vector<uint64_t> sizes(static_cast<size_t>(size_));
  run("all_gather", false, [&] {
    std::byte* in = s_->send.at_least(sizeof mine);
    std::byte* out = s_->recv.at_least(sizes.size() * sizeof mine);
    check_cuda(cudaMemcpyAsync(in, &mine, sizeof mine, cudaMemcpyHostToDevice, s_->stream), "cudaMemcpyAsync");
    return ncclAllGather(in, out, sizeof mine, ncclUint8, s_->comm, s_->stream);
  }, [&] {
    check_cuda(cudaMemcpyAsync(sizes.data(), s_->recv.data, sizes.size() * sizeof mine, cudaMemcpyDeviceToHost, s_->stream), "cudaMemcpyAsync");
  });
  for (int q = 0; q < size_; ++q) {
    if (sizes[static_cast<size_t>(q)] != mine) {
      fail("all_gather on rank " + std::to_string(rank_) + ": rank " + std::to_string(q) + " has " +
           std::to_string(sizes[static_cast<size_t>(q)]) + " bytes, rank " + std::to_string(rank_) + " " + std::to_string(mine));
    }
  }
  if (send.empty()) return;
  run("all_gather", false, [&] {
    std::byte* in = s_->send.at_least(send.size());
    std::byte* out = s_->recv.at_least(recv.size());
    check_cuda(cudaMemcpyAsync(in, send.data(), send.size(), cudaMemcpyHostToDevice, s_->stream), "cudaMemcpyAsync");
    return ncclAllGather(in, out, send.size(), ncclUint8, s_->comm, s_->stream);
  }, [&] {
    check_cuda(cudaMemcpyAsync(recv.data(), s_->recv.data, recv.size(), cudaMemcpyDeviceToHost, s_->stream), "cudaMemcpyAsync");
  });
}

void NcclWorld::all_gather_device(const void* send, void* recv, size_t bytes, void* stream) {
  check_cuda(cudaSetDevice(s_->device), "cudaSetDevice");
  if (s_->queued == nullptr) check_cuda(cudaEventCreateWithFlags(&s_->queued, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaEventRecord(s_->queued, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(s_->stream, s_->queued, 0), "cudaStreamWaitEvent");
  run("all_gather_device", false, [&] { return ncclAllGather(send, recv, bytes, ncclUint8, s_->comm, s_->stream); }, [] {});
}

void NcclWorld::all_reduce(std::span<float> data, ReduceOp op) { all_reduce_by_gathering(*this, data, op); }

void NcclWorld::reduce_scatter(std::span<const float> send, std::span<float> recv, ReduceOp op) {
  reduce_scatter_by_exchanging(*this, send, recv, op);
}

void NcclWorld::all_to_all_v(std::span<const std::byte> send, std::span<const size_t> send_counts, std::span<std::byte> recv,
                             std::span<const size_t> recv_counts) {
  const size_t n = static_cast<size_t>(size_);
  if (send_counts.size() != n || recv_counts.size() != n) fail("all_to_all_v: counts must have one entry per rank");
  size_t sent = 0, received = 0;
  for (size_t q = 0; q < n; ++q) sent += send_counts[q], received += recv_counts[q];
  if (sent != send.size() || received != recv.size()) fail("all_to_all_v: counts do not add up to the buffers");
  // Every pair agrees on its byte count first (what q sends to r is what r expects from q).
  std::vector<uint64_t> offered(send_counts.begin(), send_counts.end()), announced(n);
  const auto exchange = [&](const std::byte* from, const std::vector<size_t>& out_counts, std::byte* to,
                            const std::vector<size_t>& in_counts) {
    size_t total_out = 0, total_in = 0;
    for (size_t q = 0; q < n; ++q) total_out += out_counts[q], total_in += in_counts[q];
    run("all_to_all_v", false, [&] {
      std::byte* in = s_->send.at_least(total_out);
      std::byte* out = s_->recv.at_least(total_in);
      if (total_out) check_cuda(cudaMemcpyAsync(in, from, total_out, cudaMemcpyHostToDevice, s_->stream), "cudaMemcpyAsync");
      ncclGroupStart();
      size_t at_out = 0, at_in = 0;
      for (size_t q = 0; q < n; ++q) {
        if (out_counts[q]) ncclSend(in + at_out, out_counts[q], ncclUint8, static_cast<int>(q), s_->comm, s_->stream);
        if (in_counts[q]) ncclRecv(out + at_in, in_counts[q], ncclUint8, static_cast<int>(q), s_->comm, s_->stream);
        at_out += out_counts[q];
        at_in += in_counts[q];
      }
      return ncclGroupEnd();
    }, [&] {
      if (total_in) check_cuda(cudaMemcpyAsync(to, s_->recv.data, total_in, cudaMemcpyDeviceToHost, s_->stream), "cudaMemcpyAsync");
    });
  };
  const std::vector<size_t> one(n, sizeof(uint64_t));
  exchange(reinterpret_cast<const std::byte*>(offered.data()), one, reinterpret_cast<std::byte*>(announced.data()), one);
  for (size_t q = 0; q < n; ++q) {
    if (announced[q] != recv_counts[q]) {
      fail("all_to_all_v on rank " + std::to_string(rank_) + ": rank " + std::to_string(q) +
           " sends a different byte count than rank " + std::to_string(rank_) + " expects");
    }
  }
  exchange(send.data(), std::vector<size_t>(send_counts.begin(), send_counts.end()), recv.data(),
           std::vector<size_t>(recv_counts.begin(), recv_counts.end()));
}

void NcclWorld::broadcast(std::span<std::byte> data, int root) { broadcast_from(data, root, false); }
void NcclWorld::broadcast_untimed(std::span<std::byte> data, int root) { broadcast_from(data, root, rank_ != root); }

void NcclWorld::broadcast_from(std::span<std::byte> data, int root, bool untimed) {
  if (root < 0 || root >= size_) fail("broadcast: root " + std::to_string(root) + " is not a rank");
  if (data.empty()) return;
  run("broadcast", untimed, [&] {
    std::byte* buf = s_->send.at_least(data.size());
    if (rank_ == root) check_cuda(cudaMemcpyAsync(buf, data.data(), data.size(), cudaMemcpyHostToDevice, s_->stream), "cudaMemcpyAsync");
    return ncclBroadcast(buf, buf, data.size(), ncclUint8, root, s_->comm, s_->stream);
  }, [&] {
    check_cuda(cudaMemcpyAsync(data.data(), s_->send.data, data.size(), cudaMemcpyDeviceToHost, s_->stream), "cudaMemcpyAsync");
  });
}

void NcclWorld::barrier() {
  std::byte mine{1};
  std::vector<std::byte> all(static_cast<size_t>(size_));
  all_gather(std::span(&mine, 1), all);
}

}  // namespace k3
