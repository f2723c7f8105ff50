// Expert parallelism over in-process ranks as one Executor (EngineOptions::expert_parallel): a
// ThreadWorld of `ranks` CPU executors, each binding its share of the routed experts
// (backend/cpu/expert_parallel.h). Every call runs on every rank — the forward calls on one thread
// per rank at once, the state calls rank after rank — and returns rank 0's result, which every
// rank computes with the same bits. The engine, the scheduler and the server above it are
// unchanged; the caches are one per rank (each rank keeps the whole attention state).
#pragma once

#include <memory>

#include "backend/executor.h"
#include "runtime/cpu_executor.h"

namespace k3 {

// `caches` as for make_cpu_executor; the default sizes share the memory budget among the ranks.
std::unique_ptr<Executor> make_expert_parallel_cpu_executor(const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                                                            const cpu::LinearOptions& linear, CpuCacheOptions caches,
                                                            int ranks);

}  // namespace k3
