// The partitioning rules of tensor and expert parallelism: for every parameter, how its stored
// matrix is divided among the GPUs (docs/parallelism.md is the prose of this table).
//
// Tensor parallelism (TP) runs over the GPUs of one node (size t). A row split gives rank r rows
// [r·N/t, (r+1)·N/t) of a weight [N, K] (its outputs: heads, channels, vocabulary entries); a
// column split gives it columns [r·K/t, (r+1)·K/t) (its inputs), so each rank's product is a
// partial sum that an all-reduce adds. Replicated parameters are whole on every GPU. Routed
// experts are not split: expert parallelism (EP) gives each GPU of every node whole experts.
#pragma once

#include <cstdint>

#include "model/parameters.h"

namespace k3 {

enum class Split : uint8_t {
  kReplicate,  // whole on every GPU
  kRows,       // dim 0 divided among the node's TP ranks
  kColumns,    // dim 1 divided among the node's TP ranks; products all-reduced
  kExperts,    // routed expert bank [E, N, K]: whole experts per GPU, across all nodes
};
const char* split_name(Split split);  // "replicated", "TP rows", "TP columns", "EP"

struct ShardRule {
  Split split;
  const char* axis;  // what the split divides: "heads", "vocabulary", "channels", …; "" when replicated
};

// The rule of one parameter of the inventory (model/parameters.h). Throws k3::Error naming the
// parameter when no rule covers it (a new parameter must get a rule, never a silent default).
ShardRule shard_rule(const ParamSpec& spec);

// Part `part` of `parts` of n consecutive indices (rank `part`'s experts of every MoE layer under EP,
// its heads, channels or vocabulary entries under TP): the contiguous range [first, first + count),
// the first n % parts parts one index more. A part may be empty (more parts than indices).
struct IndexRange {
  int64_t first = 0, count = 0;
  int64_t end() const { return first + count; }
};
IndexRange split_range(int64_t n, int64_t parts, int64_t part);
// The part whose split_range holds `index`.
int64_t split_owner(int64_t index, int64_t n, int64_t parts);

// Stored bytes of TP rank `rank`'s share of a parameter of `bytes` under `split` among t ranks (the
// whole for replicated ones): bytes / t, the first bytes % t ranks one more, so shares sum to bytes.
uint64_t shard_bytes(uint64_t bytes, Split split, int64_t t, int64_t rank);

}  // namespace k3
