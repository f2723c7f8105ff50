#include "tools/launched_ranks.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/sha256.h"
#include "parallel/group_communicator.h"
#include "runtime/rank_calls.h"
#include "tools/node_ranks.h"

#ifdef K3_HAVE_MPI
#include "parallel/mpi/mpi_world.h"
#endif
#ifdef K3_HAVE_NCCL
#include "parallel/nccl/nccl_world.h"
#include "parallel/tcp_rendezvous.h"
#endif
#if defined(K3_HAVE_MPI) || defined(K3_HAVE_NCCL)
#define K3_LAUNCHED_RANKS 1  // ranks in processes: under mpirun, or started by tools/node_ranks.h
#endif

namespace k3::cli {
namespace {

// What started this process's ranks, for messages.
std::string launcher_name() { return started_node_rank() ? "--nnodes" : "mpirun"; }

// The world size mpirun or the node launcher gave this process (1 when not launched by either).
int launched_world_size() {
  if (const std::optional<NodeRank> node = started_node_rank()) return node->world;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return 1;
}

#ifdef K3_LAUNCHED_RANKS

// The launcher (mpirun, or the node supervisor of tools/node_ranks.h) ends the surviving ranks of a
// failed job with SIGTERM: each says so before it goes.
char g_terminated_line[128];
extern "C" void say_terminated(int) {
  const ssize_t ignored = ::write(STDERR_FILENO, g_terminated_line, std::strlen(g_terminated_line));
  (void)ignored;
  ::_exit(1);
}

// What every rank must agree on beyond the checkpoint: the layout and the numerics flags.
std::string rank_settings(const ModelArgs& args) {
  return "device " + args.device + " tensor " + std::to_string(args.tensor_parallel) + " experts " + std::to_string(args.expert_parallel) +
         " activations " + args.activations + " placement " +
         (args.expert_placement.empty() ? "contiguous" : sha256_file_hex(args.expert_placement)) + " redundant " +
         std::to_string(args.redundant_experts);
}

// Cache sizes every rank uses: rank 0's defaults (they depend on its host's memory).
CpuCacheOptions agreed_caches(Communicator& world, const K3Config& config, const EngineOptions& options) {
  const CpuCacheOptions asked{options.max_sequences, options.kv_blocks, options.snapshot_slots, options.max_context};
  const CacheGeometry g = cpu_cache_geometry(config, asked);
  const CacheSizes sizes = leader_cache_sizes(world, {g.kv_blocks, g.state_slots, g.snapshot_slots});
  return {sizes.state_slots, sizes.kv_blocks, sizes.snapshot_slots, options.max_context};
}

// A worker rank: loads its share, follows rank 0 and ends the process.
[[noreturn]] void follow(const ModelArgs& args, const EngineOptions& options, Communicator& world, ParallelRanks ranks,
                         const DeviceRankExecutor& device) {
  int code = 0;
  try {
    const CheckpointDir ckpt = open_checkpoint_dir(args.model);
    if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "a model directory needs config.json");
    const LoadPlan plan = plan_checkpoint(ckpt);
    PlanFiles files(plan);
    agree_on_model(world, model_fingerprint(*ckpt.config, plan, rank_settings(args)));
    std::unique_ptr<Executor> local;
    if (device) {
      local = device(*ckpt.config, plan, files, ranks);
    } else {
      const CpuCacheOptions caches = agreed_caches(world, *ckpt.config, options);
      local = make_cpu_executor(*ckpt.config, plan, files, options.linear, caches, ranks);
    }
    follow_calls(*local, world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3: rank %d: error: %s\n", world.rank(), e.what());
    code = 1;
  }
  std::exit(code);  // the world's destructor (at exit) finalizes MPI, or aborts the job after a failure
}

// This process's world: the NcclWorld of the node launcher's ranks (started at rank 0's TCP
// rendezvous); under mpirun, an NcclWorld over mpirun's MpiWorld for CUDA ranks (MPI hands out NCCL's
// unique id, NCCL carries the collectives, on device buffers where the CUDA executor gives them), else
// the MpiWorld itself.
Communicator& launched_world(const ModelArgs& args, int size) {
  const std::chrono::milliseconds timeout(static_cast<int64_t>(args.rank_timeout * 1000));
  if (const std::optional<NodeRank> node = started_node_rank()) {
#ifdef K3_HAVE_NCCL
    try {
      static TcpRendezvous rendezvous(args.master_addr, args.master_port, node->rank, size, timeout);
      static NcclWorld world(rendezvous, parse_device(args.device) + node->local_rank, timeout);
      return world;
    } catch (const Error& e) {
      throw Error(e.where(), "rank " + std::to_string(node->rank) + " of " + std::to_string(size) + ": " + e.detail());
    }
#else
    throw Error(Where{"", "", "--nnodes"}, "this k3 was built without NCCL");
#endif
  }
#ifdef K3_HAVE_MPI
  static MpiWorld mpi(timeout);
#ifdef K3_HAVE_NCCL
  if (const int device = parse_device(args.device); device >= 0) {
    try {
      static NcclWorld world(mpi, device + launched_local_rank(), timeout);
      return world;
    } catch (const Error& e) {
      throw Error(e.where(), "rank " + std::to_string(mpi.rank()) + " of " + std::to_string(size) + ": " + e.detail());
    }
  }
#endif
  return mpi;
#else
  throw Error(Where{"", "", "mpirun"}, "started " + std::to_string(size) + " ranks, but this k3 was built without MPI "
                                       "(install libopenmpi-dev and reconfigure)");
#endif
}

#endif

}  // namespace

int launched_local_rank() {
  if (const std::optional<NodeRank> node = started_node_rank()) return node->local_rank;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return 0;
}

void join_launched_ranks(const ModelArgs& args, EngineOptions& options, const DeviceRankExecutor& device) {
  const int size = launched_world_size();
  if (size <= 1) return;
#ifdef K3_LAUNCHED_RANKS
  const ParallelLayout layout{args.tensor_parallel, args.expert_parallel};
  if (layout.world() != size) {
    throw Error(Where{"", "", "--tensor-parallel"}, launcher_name() + " started " + std::to_string(size) + " ranks, but --tensor-parallel " +
                                                        std::to_string(layout.tensor) + " and --expert-parallel " +
                                                        std::to_string(layout.experts) + " use " +
                                                        std::to_string(layout.world()));
  }
  static bool joined = false;  // the workers follow one engine: a second one (eval --kl-base) would not be followed
  if (joined) throw Error(Where{"", "", "--kl-base"}, "a command over launched ranks runs one model (not --kl-base)");
  joined = true;
  Communicator& world = launched_world(args, size);
  static std::unique_ptr<GroupCommunicator> group;
  ParallelRanks ranks;
  if (layout.tensor > 1) {
    if (layout.tensor < size) group = std::make_unique<GroupCommunicator>(world, layout.tensor);
    ranks.tensor = group ? static_cast<Communicator*>(group.get()) : &world;
  }
  if (layout.experts > 1) ranks.experts = &world;
  static std::unique_ptr<ExpertPlacement> placement;
  if (options.expert_histogram) {
    placement = std::make_unique<ExpertPlacement>(*options.expert_histogram, layout.experts, options.redundant_experts);
    ranks.placement = placement.get();
  }
  std::snprintf(g_terminated_line, sizeof g_terminated_line,
                "k3: rank %d of %d: ended by %s: another rank failed or the job was stopped\n", world.rank(), size,
                launcher_name().c_str());
  std::signal(SIGTERM, say_terminated);
  options.tensor_parallel = options.expert_parallel = 1;  // the ranks are processes, not threads
  options.expert_histogram = nullptr;                     // placed above
  if (world.rank() != 0) follow(args, options, world, ranks, device);
  ranks.routing_record = options.routing_record;
  options.routing_record = nullptr;  // counted by rank 0's executor (ranks.routing_record)
  const std::string settings = rank_settings(args);
  options.executor = [&world, ranks, settings, options, device](const K3Config& config, const LoadPlan& plan, PlanFiles& files) {
    agree_on_model(world, model_fingerprint(config, plan, settings));
    if (device) return make_leader_executor(device(config, plan, files, ranks), world);
    const CpuCacheOptions caches = agreed_caches(world, config, options);
    return make_leader_executor(make_cpu_executor(config, plan, files, options.linear, caches, ranks), world);
  };
#else
  (void)options, (void)device;
  throw Error(Where{"", "", "mpirun"}, "started " + std::to_string(size) + " ranks, but this k3 was built without MPI "
                                       "(install libopenmpi-dev and reconfigure)");
#endif
}

}  // namespace k3::cli
