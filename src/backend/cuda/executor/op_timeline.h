// Per-op-class stream time of eager CUDA forward steps (op_classes.h): the executor marks, in stream
// order, which class the work enqueued from then on belongs to; each mark records a CUDA event, and
// at the step's end the time between consecutive events goes to the earlier mark's class. The events
// cost a few microseconds of host time each, so a profiled step runs slower than an unprofiled one:
// the breakdown gives shares, the benchmark's unprofiled steps the rate. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

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
  // Ends the step: records the last event, waits for it and adds each mark's time to seconds.
  void end_step(cudaStream_t stream);

  OpSeconds seconds{};
  int64_t steps = 0;

 private:
  std::vector<cudaEvent_t> events_;  // reused across steps
  std::vector<OpClass> classes_;     // the class of the mark at events_[i]
  size_t used_ = 0;
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
