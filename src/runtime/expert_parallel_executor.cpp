#include "runtime/expert_parallel_executor.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "parallel/thread_world.h"

namespace k3 {
namespace {

class ExpertParallelExecutor final : public Executor {
 public:
  ExpertParallelExecutor(const K3Config& config, const LoadPlan& plan, PlanFiles& files, const cpu::LinearOptions& linear,
                         const CpuCacheOptions& caches, int ranks)
      : world_(ranks), threads_per_rank_(std::max(1, omp_get_max_threads() / ranks)) {
    for (int r = 0; r < ranks; ++r) executors_.push_back(make_cpu_executor(config, plan, files, linear, caches, &world_.rank(r)));
  }

  CacheGeometry caches() const override { return executors_.front()->caches(); }
  void add_sequence(int64_t sequence, int64_t length) override {
    for (auto& e : executors_) e->add_sequence(sequence, length);
  }
  void free_sequence(int64_t sequence) override {
    for (auto& e : executors_) e->free_sequence(sequence);
  }
  void save_snapshot(int64_t sequence, int32_t snapshot) override {
    for (auto& e : executors_) e->save_snapshot(sequence, snapshot);
  }
  void restore_snapshot(int64_t sequence, int32_t snapshot) override {
    for (auto& e : executors_) e->restore_snapshot(sequence, snapshot);
  }

  Tensor run(std::span<const int64_t> ids, std::span<const BatchSlice> slices, std::span<const int64_t> logit_rows) override {
    Tensor first;
    world_.run([&](Communicator& rank) {
      omp_set_num_threads(threads_per_rank_);
      Tensor logits = executors_[static_cast<size_t>(rank.rank())]->run(ids, slices, logit_rows);
      if (rank.rank() == 0) first = std::move(logits);
    });
    return first;
  }

 private:
  ThreadWorld world_;
  int threads_per_rank_;  // OpenMP threads of each rank's thread: the engine's, divided among the ranks
  std::vector<std::unique_ptr<Executor>> executors_;
};

}  // namespace

std::unique_ptr<Executor> make_expert_parallel_cpu_executor(const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                                                            const cpu::LinearOptions& linear, CpuCacheOptions caches,
                                                            int ranks) {
  caches.memory_shares = ranks;
  return std::make_unique<ExpertParallelExecutor>(config, plan, files, linear, caches, ranks);
}

}  // namespace k3
