// One engine over ranks in separate processes (or threads): rank 0 runs the program — the CLI
// command or the server, its Engine and scheduler — over a leader executor that broadcasts every
// executor call to the other ranks before running it on its own executor; every other rank runs
// follow_calls, which receives each call and runs it on its executor. The rank executors are CPU
// executors dividing the model among the ranks (tensor and expert parallelism), so every call is a
// collective step of all ranks, and every rank computes the same result; the leader returns its own.
//
// Before binding any weight the ranks agree on what they load (agree_on_model): the same config,
// family, parameters, files and layout, else every rank fails with one line naming the ranks that
// differ. The workers' cache sizes are the leader's (CacheSizes), whatever each host's memory.
#pragma once

#include <memory>
#include <string>

#include "backend/executor.h"
#include "parallel/communicator.h"
#include "quant/plan/load_plan.h"

namespace k3 {

// A digest of what a rank is about to load: the config.json bytes, the plan's family, parameters
// (name, shape, scheme) and files (name, size), and `settings` (the layout and numerics flags).
std::string model_fingerprint(const K3Config& config, const LoadPlan& plan, const std::string& settings);

// Every rank's fingerprint equals rank 0's, else throws k3::Error on every rank naming the ranks
// that differ.
void agree_on_model(Communicator& world, const std::string& fingerprint);

// Rank 0's cache sizes, on every rank: kv_blocks, state_slots, snapshot_slots.
struct CacheSizes {
  int64_t kv_blocks = 0, state_slots = 0, snapshot_slots = 0;
};
CacheSizes leader_cache_sizes(Communicator& world, const CacheSizes& mine);

// Rank 0's executor: `local` (one of the world's rank executors), each call broadcast first.
// Destroying it tells the workers to return.
std::unique_ptr<Executor> make_leader_executor(std::unique_ptr<Executor> local, Communicator& world);

// A worker rank: runs the leader's calls on `local` until the leader is destroyed. Waiting for the
// next call has no timeout (the leader may be idle); a call itself is a collective with the
// world's timeout. A state call the leader's executor refused (an error of the call itself, e.g. no
// free slot) is refused here too and the worker goes on; a failed forward call ends the worker.
void follow_calls(Executor& local, Communicator& world);

}  // namespace k3
