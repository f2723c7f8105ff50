// Where every parameter of a model goes on a machine (`k3 check DIR --devices …`): the contract
// tensor- and expert-parallel execution follow (parallel/sharding.h has the per-parameter rules,
// docs/parallelism.md the prose).
//
// Layout: the GPUs of one node form a tensor-parallel group (t = GPUs per node) holding every
// parameter but the routed experts (sharded or replicated per shard_rule); nodes are data-parallel
// replicas of that part, each serving its own sequences. Routed experts are expert-parallel over
// all G GPUs: GPU g (node-major) owns the same contiguous range of experts in every MoE layer
// (E / G each, the first E mod G GPUs one more). Of its range a GPU keeps the first
// resident_experts in HBM; the rest live in its node's host memory, streamed to the GPU when
// picked, or computed there by the CPU (--cpu-experts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "parallel/machine.h"
#include "quant/plan/footprint.h"

namespace k3 {

struct PlanOptions {
  std::vector<int64_t> batches{1, 64};  // decode batch sizes (sequences of the whole deployment) to estimate
  int64_t context = 4096;               // tokens per sequence: the state reserved and read per step
};

// The decode state of one sequence over the whole model (spec §10); per GPU the KDA part is
// divided among the TP ranks (by head), the MLA latent cache is whole on each of them.
struct StateGeometry {
  uint64_t mla_bytes_per_token = 0;     // (kv_lora_rank + qk_rope_head_dim) × 2 B (bf16) × MLA layers
  uint64_t kda_bytes_per_sequence = 0;  // (H·D·D × 4 B fp32 recurrent + 3·P·(W−1) × 2 B bf16 conv) × KDA layers
};
StateGeometry state_geometry(const K3Config& config);

inline constexpr size_t kParamGroups = static_cast<size_t>(ParamGroup::Experts) + 1;

struct GpuPlacement {
  int64_t node = 0, rank = 0;                  // node, and TP rank within it
  std::vector<uint64_t> group_bytes;           // weights held, by ParamGroup (kParamGroups entries)
  uint64_t weight_bytes = 0;                   // their sum, resident routed experts included
  int64_t first_expert = 0, experts = 0;       // EP range of every MoE layer: [first, first + experts)
  int64_t resident_experts = 0;                // of the range, held in HBM in every MoE layer
  uint64_t host_expert_bytes = 0;              // the rest, in the node's host memory
  uint64_t state_bytes = 0;                    // reserved: planned sequences × context
  uint64_t free_bytes = 0;                     // memory − weights − runtime reserve − state − staging
  // Per decode step: the weights read once per step (all held but routed experts and the
  // embedding) and the multiply-adds per token of the linears held (embedding excluded).
  uint64_t step_read_bytes = 0;
  uint64_t macs_per_token = 0;
};

struct Placement {
  Machine machine;
  PlanOptions options;
  std::string family;
  bool from_layout = false;
  int64_t tp = 1, ep = 1;                       // GPUs per TP group (a node), GPUs in the EP group (all)
  uint64_t model_bytes = 0;                     // the footprint's total
  std::vector<uint64_t> group_bytes;            // the footprint by ParamGroup
  uint64_t replicated_bytes = 0;                // parameters kept whole on every GPU
  int64_t layers = 0, moe_layers = 0, num_experts = 0, experts_per_token = 0;
  int64_t expert_width = 0;                     // routed experts' input width: the latent, else hidden
  uint64_t expert_bytes = 0;                    // one expert index across every MoE layer, stored
  uint64_t expert_macs = 0;                     // its multiply-adds per token
  uint64_t embedding_row_bytes = 0;             // one row of the input embedding
  uint64_t staging_bytes = 0;                   // per GPU, for streamed experts in flight
  StateGeometry state;
  int64_t planned_sequences = 0;                // per node: ceil(max batch / nodes)
  std::vector<GpuPlacement> gpus;               // node-major: gpus[node·tp + rank]
  std::vector<uint64_t> host_bytes;             // per node: routed experts in host memory

  bool streams_experts() const;                 // some experts in host memory, copied to GPUs when picked
  bool cpu_computes_experts() const;            // some experts in host memory, computed by the CPU
};

// The placement, or a k3::Error (field '--devices') whose one-line message names what does not fit
// and by how much. Throws too for a parameter a TP split cannot divide among the node's GPUs.
Placement plan_placement(const Footprint& footprint, const K3Config& config, const Machine& machine,
                         const PlanOptions& options);

}  // namespace k3
