// `k3 <command> … --device cuda:D --expert-parallel N --nnodes M --node-rank R --master-addr H
// --master-port P`: the start without mpirun, one process per GPU, as torchrun starts PyTorch. The
// command run on each node starts N / M rank processes (local rank l on cuda:(D + l), global rank
// R·N/M + l) and supervises them; the ranks meet at rank 0's TCP rendezvous on H:P
// (parallel/tcp_rendezvous.h), which hands out the NCCL unique id, and then run as under mpirun
// (tools/launched_ranks.h) over an NcclWorld: rank 0 runs the command, the others follow it.
//
// Failures: a rank process that exits with an error or a signal makes its node's supervisor end the
// node's other ranks (SIGTERM, then SIGKILL after kRankGraceSeconds) and exit 1 naming the rank;
// ranks on other nodes fail within --rank-timeout when their NCCL collectives or the rendezvous
// stop hearing from it.
#pragma once

#include "tools/model_args.h"

namespace k3::cli {

inline constexpr int kRankGraceSeconds = 5;

// The start flags, into `args` (all four with --nnodes; none without).
void add_node_rank_options(CLI::App* cmd, ModelArgs& args);

// With --nnodes, in the command the user ran: checks the flags (k3::Error naming the flag), starts this
// node's rank processes, waits for them and exits the process (0 when every rank succeeded, else 1).
// In a rank process it started, and without --nnodes: returns.
void start_node_ranks(const ModelArgs& args);

// In a rank process start_node_ranks started: its global rank, its rank on the node and the world
// size; else std::nullopt.
struct NodeRank {
  int rank = 0, local_rank = 0, world = 1;
};
std::optional<NodeRank> started_node_rank();

}  // namespace k3::cli
