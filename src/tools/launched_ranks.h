// `mpirun -np N k3 <command> … --tensor-parallel T --expert-parallel E` (max(T, E) = N), or the
// rank processes `--nnodes` starts (tools/node_ranks.h, CUDA ranks over NCCL): one engine over N
// processes. Rank 0 runs the command — its output, its server — over a leader executor; every
// other rank follows its executor calls (runtime/rank_calls.h) and exits when rank 0's engine ends.
// The ranks agree on the model, plan and flags before loading; a mismatch is one line on every
// rank. A rank that waits longer than --rank-timeout in a collective fails the job; a rank that dies
// is reported by its launcher, which ends the others.
#pragma once

#include <functional>
#include <memory>

#include "parallel/communicator.h"
#include "runtime/engine.h"
#include "tools/model_args.h"

namespace k3::cli {

// How a rank makes its executor on a device backend (--device cuda): its share of the heads and of
// the routed experts, divided over `ranks` (the tensor-parallel group and the world).
using DeviceRankExecutor =
    std::function<std::unique_ptr<Executor>(const K3Config&, const LoadPlan&, PlanFiles&, const ParallelRanks& ranks)>;

// Under mpirun with more than one rank: on rank 0, points `options` at the leader executor (the
// in-process layout options are then unused); on the other ranks, loads the model, follows rank 0's
// calls and exits the process. Each rank runs a CPU executor, or `device`'s when given. Elsewhere: nothing. Throws k3::Error for a layout that does not use the ranks mpirun
// started, or when this k3 was built without MPI.
void join_launched_ranks(const ModelArgs& args, EngineOptions& options, const DeviceRankExecutor& device = {});

// This process's rank among those mpirun or --nnodes started on its node (0 when not launched).
int launched_local_rank();

}  // namespace k3::cli
