// In-process ranks: a world of `size` communicators sharing memory, one per thread. Used to run the
// parallel paths (tensor and expert parallelism) on the CPU backend, in CI, with the exact
// semantics of the multi-process ones. Collectives meet at a barrier, each rank reads the others'
// published buffers directly, and a second barrier releases them; sums run in rank order.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "parallel/communicator.h"

namespace k3 {

class ThreadWorld {
 public:
  // `timeout`: how long a rank waits at a collective for the others before the world fails.
  explicit ThreadWorld(int size, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  ~ThreadWorld();
  ThreadWorld(const ThreadWorld&) = delete;
  ThreadWorld& operator=(const ThreadWorld&) = delete;

  int size() const;
  Communicator& rank(int r);

  // Runs fn(communicator) on one thread per rank and joins them. When a rank throws, the world is
  // aborted (the other ranks' collectives throw) and, after all threads end, the first rank's own
  // exception is rethrown.
  void run(const std::function<void(Communicator&)>& fn);

 private:
  struct Shared;
  class Rank;
  std::shared_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace k3
