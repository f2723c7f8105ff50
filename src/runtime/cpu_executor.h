// The CPU executor: forward() over the CPU backend, the paged latent cache and the KDA state slots
// and snapshots in host memory.
#pragma once

#include <memory>

#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/weights.h"
#include "backend/executor.h"
#include "parallel/ranks.h"

namespace k3 {

// CPU cache sizes when the options leave them 0.
inline constexpr int64_t kCpuDefaultSequences = 256;
// Share of the host's available memory the CPU caches may grow to (pages are allocated on use).
inline constexpr double kCpuCacheMemoryShare = 0.5;

// Cache sizes requested by EngineOptions (0 = the defaults documented there).
struct CpuCacheOptions {
  int64_t max_sequences = 0, kv_blocks = 0, snapshot_slots = 0;
  int64_t max_context = 0;  // 0 = the model's max_position_embeddings
  int64_t memory_shares = 1;  // executors dividing the default caches' memory budget among them
};

// The geometry a CPU executor of this model gets for `options`.
CacheGeometry cpu_cache_geometry(const K3Config& config, const CpuCacheOptions& options);

// `ranks`: the ranks this executor is one of, and what they divide (make_cpu_backend): the routed
// experts (backend/cpu/expert_parallel.h), the rest (backend/cpu/tensor_parallel.h). Every rank
// makes the same calls; each returns the whole logits (gathered) and the same greedy picks.
// `bound` (may be null): weights bound once for several in-process ranks (bind_weights with every
// expert); the executor keeps views of its share (view_weights) instead of binding its own.
std::unique_ptr<Executor> make_cpu_executor(const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                                            const cpu::LinearOptions& linear, const CpuCacheOptions& caches,
                                            ParallelRanks ranks = {}, const ModelWeights* bound = nullptr);

}  // namespace k3
