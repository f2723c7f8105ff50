// How one model replica is divided among ranks that all run the same tokens: the tensor-parallel
// part (heads, channels, vocabulary: parallel/sharding.h) over groups of `tensor` consecutive ranks,
// the routed experts over all `experts` ranks. The world has max(tensor, experts) ranks; with both
// above 1, experts is the world and a multiple of tensor (attention TP within a group, MoE EP across
// every rank: how SGLang and vLLM run DeepSeek-style MoE).
#pragma once

#include <string>

#include "parallel/communicator.h"
#include "parallel/expert_placement.h"

namespace k3 {

// In-process ranks at most, per kind of split.
inline constexpr int kMaxParallelRanks = 64;

struct ParallelLayout {
  int tensor = 1, experts = 1;
  // With experts > 1: the routing histogram the experts are placed from, `redundant_experts` extra
  // copies per rank (parallel/expert_placement.h); null: the contiguous split.
  const RoutingHistogram* expert_histogram = nullptr;
  int redundant_experts = 0;
  int world() const { return tensor > experts ? tensor : experts; }
};

// Throws k3::Error naming `tensor_field` or `experts_field` when the layout is not one of the above.
void check_parallel_layout(const ParallelLayout& layout, const std::string& tensor_field, const std::string& experts_field);

// The communicators one rank's executor runs with; null: that part is not divided.
struct ParallelRanks {
  Communicator* tensor = nullptr;   // the ranks the tensor-parallel part is divided among
  Communicator* experts = nullptr;  // the ranks the routed experts are divided among
  // Which of `experts`' ranks holds which expert; null: the contiguous split (split_range).
  const ExpertPlacement* placement = nullptr;
  // When set, every routed pick of the forward passes is counted here (by one rank of a world).
  RoutingHistogram* routing_record = nullptr;
};

}  // namespace k3
