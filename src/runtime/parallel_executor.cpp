#include "runtime/parallel_executor.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "parallel/group_communicator.h"
#include "parallel/thread_world.h"

namespace k3 {
namespace {

class ParallelExecutor final : public Executor {
 public:
  ParallelExecutor(const K3Config& config, const LoadPlan& plan, PlanFiles& files, const cpu::LinearOptions& linear,
                   const CpuCacheOptions& caches, ParallelLayout layout, RoutingHistogram* routing_record)
      : world_(layout.world()), threads_per_rank_(std::max(1, omp_get_max_threads() / layout.world())) {
    if (layout.expert_histogram && layout.experts > 1) {
      placement_ = std::make_unique<ExpertPlacement>(*layout.expert_histogram, layout.experts, layout.redundant_experts);
    }
    // One binding, viewed by every rank: the checkpoint's bytes are bound (repacked, dequantised)
    // once, whatever the rank count.
    const ModelWeights bound = bind_weights(config, plan, files, linear);
    for (int r = 0; r < layout.world(); ++r) {
      Communicator& rank = world_.rank(r);
      ParallelRanks ranks;
      if (layout.tensor > 1) {
        ranks.tensor = &rank;
        if (layout.tensor < layout.world()) ranks.tensor = groups_.emplace_back(std::make_unique<GroupCommunicator>(rank, layout.tensor)).get();
      }
      if (layout.experts > 1) ranks.experts = &rank;
      ranks.placement = placement_.get();
      if (r == 0) ranks.routing_record = routing_record;
      executors_.push_back(make_cpu_executor(config, plan, files, linear, caches, ranks, &bound));
    }
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
    return on_every_rank([&](Executor& e) { return e.run(ids, slices, logit_rows); });
  }
  std::vector<int64_t> run_argmax(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                                  std::span<const int64_t> logit_rows) override {
    return on_every_rank([&](Executor& e) { return e.run_argmax(ids, slices, logit_rows); });
  }

 private:
  // Runs `call` on every rank's executor at once, on one thread each; rank 0's result.
  template <typename Call>
  auto on_every_rank(const Call& call) -> decltype(call(std::declval<Executor&>())) {
    decltype(call(std::declval<Executor&>())) first;
    world_.run([&](Communicator& rank) {
      omp_set_num_threads(threads_per_rank_);
      auto result = call(*executors_[static_cast<size_t>(rank.rank())]);
      if (rank.rank() == 0) first = std::move(result);
    });
    return first;
  }

  ThreadWorld world_;
  std::unique_ptr<ExpertPlacement> placement_;  // null: the contiguous split
  int threads_per_rank_;  // OpenMP threads of each rank's thread: the engine's, divided among the ranks
  std::vector<std::unique_ptr<GroupCommunicator>> groups_;  // tensor-parallel groups inside the world
  std::vector<std::unique_ptr<Executor>> executors_;
};

}  // namespace

std::unique_ptr<Executor> make_parallel_cpu_executor(const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                                                     const cpu::LinearOptions& linear, CpuCacheOptions caches,
                                                     ParallelLayout layout, RoutingHistogram* routing_record) {
  caches.memory_shares = layout.world();
  return std::make_unique<ParallelExecutor>(config, plan, files, linear, caches, layout, routing_record);
}

}  // namespace k3
