#include "backend/cuda/executor/op_timeline.h"

#include <algorithm>

#include "backend/cuda/core/check.h"
#include "core/error.h"

namespace k3::cuda {

OpTimeline::~OpTimeline() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  for (const Picks& p : picks_) cudaFreeHost(p.host);
}

void OpTimeline::record_picks(const DeviceTensor& ids, cudaStream_t stream) {
  expect_dtype(ids, DType::kI32, "profiled router picks");
  if (picks_used_ == picks_.size()) picks_.emplace_back();
  Picks& p = picks_[picks_used_++];
  p.count = static_cast<size_t>(ids.rows * ids.cols);
  if (p.count > p.capacity) {
    if (p.host != nullptr) K3_CUDA_CHECK(cudaFreeHost(p.host));
    p.host = nullptr;
    K3_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&p.host), p.count * sizeof(int32_t), cudaHostAllocDefault));
    p.capacity = p.count;
  }
  const size_t row = static_cast<size_t>(ids.cols) * sizeof(int32_t);
  K3_CUDA_CHECK(cudaMemcpy2DAsync(p.host, row, ids.data, static_cast<size_t>(ids.ld) * sizeof(int32_t), row,
                                  static_cast<size_t>(ids.rows), cudaMemcpyDeviceToHost, stream));
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
  for (size_t i = 0; i < picks_used_; ++i) {
    std::vector<int32_t> ids(picks_[i].host, picks_[i].host + picks_[i].count);
    std::sort(ids.begin(), ids.end());
    int64_t busiest = 0;
    for (auto run = std::lower_bound(ids.begin(), ids.end(), 0); run != ids.end();) {
      const auto end = std::upper_bound(run, ids.end(), *run);
      busiest = std::max<int64_t>(busiest, end - run);
      run = end;
    }
    busiest_expert_rows += busiest;
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    touched_experts += std::count_if(ids.begin(), ids.end(), [](int32_t e) { return e >= 0; });
    ++moe_layer_calls;
  }
  used_ = 0;
  picks_used_ = 0;
  current_ = OpClass::kEmbedding;
  ++steps;
}

}  // namespace k3::cuda
