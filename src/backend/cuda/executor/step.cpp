// What a step's linears share: the one-expert dispatches and the forms of a block's input (step.h).
#include "backend/cuda/executor/step.h"

namespace k3::cuda {
namespace {

bool same_view(const DeviceTensor& a, const DeviceTensor& b) {
  return a.data == b.data && a.dtype == b.dtype && a.rows == b.rows && a.cols == b.cols && a.ld == b.ld;
}

}  // namespace

void SharedInputForms::share(const DeviceTensor& x) {
  if (!same_view(x, rows_)) rows_ = x, count_ = 0;
}

void* SharedInputForms::find(const DeviceTensor& x, int64_t key) const {
  if (rows_.data == nullptr || !same_view(x, rows_)) return nullptr;
  for (int i = 0; i < count_; ++i) {
    if (entries_[static_cast<size_t>(i)].key == key) return entries_[static_cast<size_t>(i)].data;
  }
  return nullptr;
}

bool SharedInputForms::keep(const DeviceTensor& x, int64_t key, void* data, size_t end) {
  if (rows_.data == nullptr || !same_view(x, rows_) || count_ == static_cast<int>(entries_.size())) return false;
  entries_[static_cast<size_t>(count_++)] = {key, data, end};
  return true;
}

SharedInputForms::Form SharedInputForms::get(Arena& arena, const DeviceTensor& x, int64_t key, size_t bytes,
                                             const char* what) {
  if (void* kept = find(x, key)) return {kept, true};
  void* data = arena.alloc(bytes, what);
  keep(x, key, data, arena.mark());
  return {data, false};
}

void OneExpertDispatches::lay_out(Arena& arena, int64_t rows, int64_t logit_rows) {
  count_ = 0;
  for (const int64_t r : {rows, logit_rows}) {
    if (r <= 0 || (count_ == 1 && entries_[0].d.tokens == r)) continue;
    void* buffer = arena.alloc(moe_dispatch_bytes(r, 1, 1), "one-expert dispatch");
    entries_[static_cast<size_t>(count_++)] = {moe_dispatch_view(buffer, r, 1, 1), false};
  }
}

const MoeDispatch* OneExpertDispatches::get(int64_t rows, cudaStream_t stream) {
  for (int i = 0; i < count_; ++i) {
    Entry& e = entries_[static_cast<size_t>(i)];
    if (e.d.tokens != rows) continue;
    if (!e.written) {
      moe_one_expert_dispatch(e.d, stream);
      e.written = true;
    }
    return &e.d;
  }
  return nullptr;
}

}  // namespace k3::cuda
