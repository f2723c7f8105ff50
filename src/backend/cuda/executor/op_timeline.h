// Per-op-class stream time of eager CUDA forward steps (op_classes.h): the executor marks, in stream
// order, which class the work enqueued from then on belongs to; each mark records a CUDA event, and
// at the step's end the time between consecutive events goes to the earlier mark's class. The events
// cost a few microseconds of host time each, so a profiled step runs slower than an unprofiled one:
// the breakdown gives shares, the benchmark's unprofiled steps the rate. A profiled step also records
// each MoE layer's router picks and counts the distinct experts they name (the experts whose weights
// the step actually reads) and the rows of the busiest one (what the grouped GEMMs' longest expert
// takes). Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/core/tensor.h"
#include "backend/cuda/executor/op_classes.h"

namespace k3::cuda {

class OpTimeline {
 public:
  OpTimeline() = default;
  ~OpTimeline();
  OpTimeline(const OpTimeline&) = delete;
  OpTimeline& operator=(const OpTimeline&) = delete;

  // From here on `stream`'s work belongs to `c`; returns the class it was before.
  OpClass mark(OpClass c, cudaStream_t stream);
  OpClass current() const { return current_; }
  // One MoE layer's router picks (i32 [T, k], the model's expert ids), copied to the host on `stream`.
  void record_picks(const DeviceTensor& ids, cudaStream_t stream);
  // Ends the step: records the last event, waits for it, adds each mark's time to seconds and each
  // recorded layer's distinct experts to touched_experts.
  void end_step(cudaStream_t stream);

  OpSeconds seconds{};
  int64_t steps = 0;
  int64_t touched_experts = 0;  // Σ over the profiled steps' MoE layer calls of the distinct experts picked
  int64_t busiest_expert_rows = 0;  // Σ over the same calls of the most rows one expert got
  int64_t moe_layer_calls = 0;

 private:
  struct Picks {
    int32_t* host = nullptr;  // pinned
    size_t capacity = 0, count = 0;
  };
  std::vector<cudaEvent_t> events_;  // reused across steps
  std::vector<OpClass> classes_;     // the class of the mark at events_[i]
  size_t used_ = 0;
  std::vector<Picks> picks_;  // reused across steps
  size_t picks_used_ = 0;
  OpClass current_ = OpClass::kEmbedding;
};

// Marks `c` for the scope's lifetime, then the class before it again; nothing without a timeline.
class OpScope {
 public:
  OpScope(OpTimeline* timeline, OpClass c, cudaStream_t stream)
      : timeline_(timeline), stream_(stream), before_(timeline != nullptr ? timeline->mark(c, stream) : c) {}
  ~OpScope() {
    if (timeline_ != nullptr) timeline_->mark(before_, stream_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpTimeline* timeline_;
  cudaStream_t stream_;
  OpClass before_;
};

}  // namespace k3::cuda
