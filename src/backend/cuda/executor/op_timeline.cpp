#include "backend/cuda/executor/op_timeline.h"

#include "backend/cuda/core/check.h"

namespace k3::cuda {

OpTimeline::~OpTimeline() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

OpClass OpTimeline::mark(OpClass c, cudaStream_t stream) {
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    K3_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
    classes_.push_back(c);
  }
  K3_CUDA_CHECK(cudaEventRecord(events_[used_], stream));
  classes_[used_++] = c;
  const OpClass before = current_;
  current_ = c;
  return before;
}

void OpTimeline::end_step(cudaStream_t stream) {
  if (used_ == 0) return;
  const OpClass last = current_;
  mark(last, stream);  // the end of the last mark's span
  K3_CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
  for (size_t i = 0; i + 1 < used_; ++i) {
    float ms = 0;
    K3_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    seconds[static_cast<size_t>(classes_[i])] += ms * 1e-3;
  }
  used_ = 0;
  current_ = OpClass::kEmbedding;
  ++steps;
}

}  // namespace k3::cuda
