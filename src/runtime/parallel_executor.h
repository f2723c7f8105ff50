// Tensor and expert parallelism over in-process ranks as one Executor (EngineOptions::tensor_parallel,
// expert_parallel): a ThreadWorld of layout.world() executors — CPU executors, each binding its share
// (parallel/ranks.h: the tensor-parallel part over groups of layout.tensor consecutive ranks, the
// routed experts over all layout.experts ranks). Every call runs on every rank — the forward calls on
// one thread per rank at once, the state calls rank after rank — and returns rank 0's result, which
// every rank computes with the same bits. The engine, the scheduler and the server above it are
// unchanged; the caches are one per rank (each keeps its heads' KDA state and the whole latent cache).
// The weights are bound once and each rank keeps views of its share (view_weights).
#pragma once

#include <functional>
#include <memory>

#include "backend/executor.h"
#include "parallel/ranks.h"
#include "runtime/cpu_executor.h"

namespace k3 {

// One rank's executor for `rank` of the world (made on the calling thread, rank after rank).
using RankExecutorFactory = std::function<std::unique_ptr<Executor>(Communicator& rank)>;
// The executors of a ThreadWorld of `world` ranks as one Executor, whatever their backend (the CPU
// ranks below; the CUDA backend's expert-parallel ranks).
std::unique_ptr<Executor> make_rank_executors(int world, const RankExecutorFactory& make);

// The same over a world laid out as `layout` (check_parallel_layout): `make` receives each rank's
// communicators — the tensor-parallel group (the world itself, or a GroupCommunicator of `tensor`
// consecutive ranks) and the expert-parallel world; placement and routing_record unset — and its
// rank of the world.
using LayoutRankFactory = std::function<std::unique_ptr<Executor>(const ParallelRanks& ranks, Communicator& world_rank)>;
std::unique_ptr<Executor> make_layout_executors(const ParallelLayout& layout, const LayoutRankFactory& make);

// `caches` as for make_cpu_executor; the default sizes share the memory budget among the ranks.
// `layout` must pass check_parallel_layout. `routing_record` (may be null): rank 0 counts every pick.
std::unique_ptr<Executor> make_parallel_cpu_executor(const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                                                     const cpu::LinearOptions& linear, CpuCacheOptions caches,
                                                     ParallelLayout layout, RoutingHistogram* routing_record = nullptr);

}  // namespace k3
