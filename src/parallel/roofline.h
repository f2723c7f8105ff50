// The decode performance model of a placement (`k3 check --devices`, docs/parallelism.md): for a
// batch of B sequences (the whole deployment), what one decode step moves through each GPU's HBM,
// its NVLink and network ports, the PCIe links and the host's memory, and the time that takes at
// the rates of parallel/machine.h. The busiest GPU sets the step: the node with ceil(B / nodes)
// sequences, the GPU owning the most experts.
//
// Assumptions (each a formula below): routing is uniform and independent per token (a token picks
// k distinct experts of E, so an expert is touched by a step with probability 1 − (1 − k/E)^B);
// every sequence is --context tokens long; expert parallel traffic is balanced over a node's GPUs;
// nothing overlaps: step = max(HBM time, compute time) + NVLink + network + PCIe + CPU + latency
// (overlap_tokens_per_second is the bound if they all overlapped, latency excluded).
#pragma once

#include <cstdint>

#include "model/config.h"
#include "parallel/placement.h"

namespace k3 {

// Expected distinct experts B tokens touch, each picking k distinct of E uniformly: E·(1 − (1 − k/E)^B).
double expected_distinct_experts(double experts, double k, double batch);
// Probability that one token's k distinct picks of E miss every one of m given experts:
// C(E − m, k) / C(E, k).
double prob_untouched(int64_t experts, int64_t k, int64_t m);

struct DecodeEstimate {
  int64_t batch = 0;
  bool fits = true;             // batch ≤ the sequences the placement reserved state for
  double node_tokens = 0;       // sequences on the busiest node
  double experts_touched = 0;   // per MoE layer, all GPUs
  double dests_in_node = 0;     // GPUs of the token's node that one token's picks reach (expected)
  double dests_off_node = 0;    // GPUs of other nodes that they reach
  // Bytes per step on the busiest GPU (cpu_bytes: its node's CPU).
  double weight_bytes = 0, expert_bytes = 0, state_bytes = 0;  // HBM reads: non-expert weights, experts, state
  double flops = 0;
  double allreduce_bytes = 0, a2a_nvlink_bytes = 0;  // NVLink: TP collectives; expert dispatch + combine
  double network_bytes = 0;                          // InfiniBand: dispatch + combine to other nodes
  double pcie_bytes = 0;                             // streamed experts, or activations to CPU experts
  double host_read_bytes = 0;                        // per node: host memory the streamed copies read
  double cpu_bytes = 0;                              // per node: experts the CPU computes
  int64_t collectives = 0, node_collectives = 0, host_round_trips = 0;
  // Seconds.
  double memory_s = 0, compute_s = 0, nvlink_s = 0, network_s = 0, pcie_s = 0, cpu_s = 0, latency_s = 0;

  double hbm_bytes() const { return weight_bytes + expert_bytes + state_bytes; }
  double step_seconds() const;
  double tokens_per_second() const;
  double overlap_tokens_per_second() const;
};

DecodeEstimate estimate_decode(const Placement& placement, const K3Config& config, int64_t batch);

}  // namespace k3
