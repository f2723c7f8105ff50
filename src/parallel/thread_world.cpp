#include "parallel/thread_world.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"

namespace k3 {

// memcpy that accepts the null data() of an empty span (memcpy itself must not be given null).
static void copy_bytes(std::byte* to, const void* from, size_t bytes) {
  if (bytes != 0) std::memcpy(to, from, bytes);
}

// What a rank publishes for the collective in progress.
struct Published {
  const void* send = nullptr;
  size_t bytes = 0;                      // of send (all_to_all_v: its total)
  std::span<const size_t> send_counts;  // all_to_all_v
};

struct ThreadWorld::Shared {
  int size;
  std::chrono::milliseconds timeout;
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool failed = false;
  std::string reason;
  std::vector<Published> slots;

  Shared(int n, std::chrono::milliseconds t) : size(n), timeout(t), slots(static_cast<size_t>(n)) {}

  void fail(const std::string& why) {
    std::lock_guard lock(mutex);
    if (!failed) {
      failed = true;
      reason = why;
    }
    cv.notify_all();
  }
  [[noreturn]] void throw_failed() const { throw Error("parallel world failed: " + reason); }

  // A barrier that fails the world after `timeout` (unless `untimed`), and throws once the world
  // has failed.
  void meet(int rank, const char* what, bool untimed = false) {
    std::unique_lock lock(mutex);
    if (failed) throw_failed();
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    const auto done = [&] { return generation != gen || failed; };
    if (untimed) {
      cv.wait(lock, done);
    } else if (!cv.wait_for(lock, timeout, done)) {
      failed = true;
      reason = "rank " + std::to_string(rank) + " waited " + std::to_string(timeout.count()) + " ms in " + what +
               " for the other ranks";
      cv.notify_all();
    }
    if (failed) throw_failed();
  }
};

class ThreadWorld::Rank final : public Communicator {
 public:
  Rank(Shared& s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_.size; }

  void all_reduce(std::span<float> data, ReduceOp op) override {
    publish(data.data(), data.size_bytes());
    s_.meet(rank_, "all_reduce");
    same_sizes("all_reduce");
    std::vector<float> out(data.size());
    reduce(op, 0, out);
    s_.meet(rank_, "all_reduce");
    std::copy(out.begin(), out.end(), data.begin());
  }

  void reduce_scatter(std::span<const float> send, std::span<float> recv, ReduceOp op) override {
    publish(send.data(), send.size_bytes());
    s_.meet(rank_, "reduce_scatter");
    same_sizes("reduce_scatter");
    if (send.size() != recv.size() * static_cast<size_t>(s_.size)) {
      fail("reduce_scatter", "sends " + std::to_string(send.size()) + " values for " + std::to_string(s_.size) + " ranks of " +
                                 std::to_string(recv.size()));
    }
    reduce(op, static_cast<size_t>(rank_) * recv.size(), recv);
    s_.meet(rank_, "reduce_scatter");
  }

  void all_gather(std::span<const std::byte> send, std::span<std::byte> recv) override {
    publish(send.data(), send.size());
    s_.meet(rank_, "all_gather");
    same_sizes("all_gather");
    if (recv.size() != send.size() * static_cast<size_t>(s_.size)) {
      fail("all_gather", "receives " + std::to_string(recv.size()) + " bytes for " + std::to_string(s_.size) + " ranks of " +
                             std::to_string(send.size()));
    }
    for (int q = 0; q < s_.size; ++q) copy_bytes(recv.data() + static_cast<size_t>(q) * send.size(), slot(q).send, send.size());
    s_.meet(rank_, "all_gather");
  }

  void all_to_all_v(std::span<const std::byte> send, std::span<const size_t> send_counts, std::span<std::byte> recv,
                    std::span<const size_t> recv_counts) override {
    const size_t n = static_cast<size_t>(s_.size);
    if (send_counts.size() != n || recv_counts.size() != n) fail("all_to_all_v", "counts must have one entry per rank");
    size_t sent = 0, received = 0;
    for (size_t q = 0; q < n; ++q) sent += send_counts[q], received += recv_counts[q];
    if (sent != send.size() || received != recv.size()) fail("all_to_all_v", "counts do not add up to the buffers");
    publish(send.data(), send.size(), send_counts);
    s_.meet(rank_, "all_to_all_v");
    size_t at = 0;
    for (int q = 0; q < s_.size; ++q) {
      const Published& p = slot(q);
      if (p.send_counts.size() != n || p.send_counts[static_cast<size_t>(rank_)] != recv_counts[static_cast<size_t>(q)]) {
        fail("all_to_all_v", "rank " + std::to_string(q) + " sends a different byte count than rank " + std::to_string(rank_) +
                                 " expects");
      }
      size_t offset = 0;
      for (int r = 0; r < rank_; ++r) offset += p.send_counts[static_cast<size_t>(r)];
      copy_bytes(recv.data() + at, static_cast<const std::byte*>(p.send) + offset, recv_counts[static_cast<size_t>(q)]);
      at += recv_counts[static_cast<size_t>(q)];
    }
    s_.meet(rank_, "all_to_all_v");
  }

  void broadcast(std::span<std::byte> data, int root) override { broadcast_from(data, root, false); }
  void broadcast_untimed(std::span<std::byte> data, int root) override { broadcast_from(data, root, true); }

  void barrier() override { s_.meet(rank_, "barrier"); }
  void abort(const std::string& reason) override { s_.fail("rank " + std::to_string(rank_) + ": " + reason); }

 private:
  void broadcast_from(std::span<std::byte> data, int root, bool untimed) {
    if (root < 0 || root >= s_.size) fail("broadcast", "root " + std::to_string(root) + " is not a rank");
    publish(data.data(), data.size());
    s_.meet(rank_, "broadcast", untimed && rank_ != root);
    same_sizes("broadcast");
    if (rank_ != root) copy_bytes(data.data(), slot(root).send, data.size());
    s_.meet(rank_, "broadcast");
  }
  const Published& slot(int q) const { return s_.slots[static_cast<size_t>(q)]; }
  void publish(const void* send, size_t bytes, std::span<const size_t> counts = {}) {
    s_.slots[static_cast<size_t>(rank_)] = Published{send, bytes, counts};
  }
  [[noreturn]] void fail(const char* what, const std::string& why) {
    s_.fail(std::string(what) + " on rank " + std::to_string(rank_) + ": " + why);
    s_.throw_failed();
  }
  void same_sizes(const char* what) {
    for (int q = 0; q < s_.size; ++q) {
      if (slot(q).bytes != slot(rank_).bytes) {
        fail(what, "rank " + std::to_string(q) + " has " + std::to_string(slot(q).bytes) + " bytes, rank " + std::to_string(rank_) +
                       " " + std::to_string(slot(rank_).bytes));
      }
    }
  }
  // out[i] = op over ranks (in rank order) of their published floats at first + i.
  void reduce(ReduceOp op, size_t first, std::span<float> out) const {
    const float* r0 = static_cast<const float*>(slot(0).send) + first;
    std::copy(r0, r0 + out.size(), out.begin());
    for (int q = 1; q < s_.size; ++q) {
      const float* x = static_cast<const float*>(slot(q).send) + first;
      if (op == ReduceOp::kSum) {
        for (size_t i = 0; i < out.size(); ++i) out[i] += x[i];
      } else {
        for (size_t i = 0; i < out.size(); ++i) out[i] = std::max(out[i], x[i]);
      }
    }
  }

  Shared& s_;
  int rank_;
};

ThreadWorld::ThreadWorld(int size, std::chrono::milliseconds timeout) {
  if (size < 1) throw Error(Where{"", "", "world size"}, "must be ≥ 1, got " + std::to_string(size));
  shared_ = std::make_shared<Shared>(size, timeout);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(*shared_, r));
}

ThreadWorld::~ThreadWorld() = default;

int ThreadWorld::size() const { return shared_->size; }
Communicator& ThreadWorld::rank(int r) { return *ranks_.at(static_cast<size_t>(r)); }

void ThreadWorld::run(const std::function<void(Communicator&)>& fn) {
  std::mutex first_mutex;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (auto& r : ranks_) {
    threads.emplace_back([&, comm = r.get()] {
      try {
        fn(*comm);
      } catch (const std::exception& e) {
        {
          std::lock_guard lock(first_mutex);
          // A rank's own failure comes first; the others' are the world failing after it.
          if (!first) first = std::current_exception();
        }
        comm->abort(e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace k3
