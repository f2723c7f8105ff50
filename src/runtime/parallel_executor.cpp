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
  ParallelExecutor(int world, const RankExecutorFactory& make)
      : world_(world), threads_per_rank_(std::max(1, omp_get_max_threads() / world)), make_(make) {
    for (int r = 0; r < world; ++r) executors_.push_back(make_(world_.rank(r)));
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
  bool samples_on_device() const override { return executors_.front()->samples_on_device(); }
  std::vector<int64_t> run_sample(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                                  std::span<const int64_t> logit_rows, std::span<const RowSampling> sampling) override {
    return on_every_rank([&](Executor& e) { return e.run_sample(ids, slices, logit_rows, sampling); });
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
  int threads_per_rank_;  // OpenMP threads of each rank's thread: the engine's, divided among the ranks
  RankExecutorFactory make_;  // kept: what it captured may be used by the executors it made
  std::vector<std::unique_ptr<Executor>> executors_;
};

}  // namespace

std::unique_ptr<Executor> make_rank_executors(int world, const RankExecutorFactory& make) {
  return std::make_unique<ParallelExecutor>(world, make);
}

std::unique_ptr<Executor> make_layout_executors(const ParallelLayout& layout, const LayoutRankFactory& make) {
  // The tensor-parallel groups inside the world, alive as long as the factory.
  auto groups = std::make_shared<std::vector<std::unique_ptr<GroupCommunicator>>>();
  return make_rank_executors(layout.world(), [layout, groups, make](Communicator& rank) {
    ParallelRanks ranks;
    if (layout.tensor > 1) {
      ranks.tensor = &rank;
      if (layout.tensor < layout.world()) ranks.tensor = groups->emplace_back(std::make_unique<GroupCommunicator>(rank, layout.tensor)).get();
    }
    if (layout.experts > 1) ranks.experts = &rank;
    return make(ranks, rank);
  });
}

std::unique_ptr<Executor> make_parallel_cpu_executor(const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                                                     const cpu::LinearOptions& linear, CpuCacheOptions caches,
                                                     ParallelLayout layout, RoutingHistogram* routing_record) {
  caches.memory_shares = layout.world();
  // What the ranks' executors use beyond their communicators, alive as long as the factory.
  struct Shared {
    std::unique_ptr<ExpertPlacement> placement;  // null: the contiguous split
    ModelWeights bound;
  };
  auto shared = std::make_shared<Shared>();
  if (layout.expert_histogram && layout.experts > 1) {
    shared->placement = std::make_unique<ExpertPlacement>(*layout.expert_histogram, layout.experts, layout.redundant_experts);
  }
  // One binding, viewed by every rank: the checkpoint's bytes are bound (repacked, dequantised)
  // once, whatever the rank count.
  shared->bound = bind_weights(config, plan, files, linear);
  std::unique_ptr<Executor> executor =
      make_layout_executors(layout, [=, &config, &plan, &files](const ParallelRanks& layout_ranks, Communicator& rank) {
        ParallelRanks ranks = layout_ranks;
        ranks.placement = shared->placement.get();
        if (rank.rank() == 0) ranks.routing_record = routing_record;
        return make_cpu_executor(config, plan, files, linear, caches, ranks, &shared->bound);
      });
  shared->bound = ModelWeights{};  // each rank keeps views of what it uses
  return executor;
}

}  // namespace k3
