// How one model replica is divided among ranks that all run the same tokens: the tensor-parallel
// part (heads, channels, vocabulary: parallel/sharding.h) over groups of `tensor` consecutive ranks,
// the routed experts over all `experts` ranks. The world has max(tensor, experts) ranks; with both
// above 1, experts is the world and a multiple of tensor (attention TP within a group, MoE EP across
// every rank: how SGLang and vLLM run DeepSeek-style MoE).
#pragma once

#include <string>

#include "parallel/communicator.h"

namespace k3 {

// In-process ranks at most, per kind of split.
inline constexpr int kMaxParallelRanks = 64;

struct ParallelLayout {
  int tensor = 1, experts = 1;
  int world() const { return tensor > experts ? tensor : experts; }
};

// Throws k3::Error naming `tensor_field` or `experts_field` when the layout is not one of the above.
void check_parallel_layout(const ParallelLayout& layout, const std::string& tensor_field, const std::string& experts_field);

// The communicators one rank's executor runs with; null: that part is not divided.
struct ParallelRanks {
  Communicator* tensor = nullptr;   // the ranks the tensor-parallel part is divided among
  Communicator* experts = nullptr;  // the ranks the routed experts are divided among
};

}  // namespace k3
