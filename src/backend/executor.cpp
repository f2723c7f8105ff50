#include "backend/executor.h"

#include <cmath>

#include "core/error.h"

namespace k3 {

std::vector<int64_t> argmax_rows(const Tensor& logits) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < logits.rows; ++r) {
    const float* row = logits.row(r);
    int64_t best = 0;
    for (int64_t c = 0; c < logits.cols; ++c) {
      if (!std::isfinite(row[c])) {
        best = -1;
        break;
      }
      if (row[c] > row[best]) best = c;
    }
    out.push_back(best);
  }
  return out;
}

std::vector<int64_t> Executor::run_argmax(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                                          std::span<const int64_t> logit_rows) {
  return argmax_rows(run(ids, slices, logit_rows));
}

std::vector<int64_t> Executor::run_sample(std::span<const int64_t>, std::span<const BatchSlice>, std::span<const int64_t>,
                                          std::span<const RowSampling>) {
  throw Error("this executor samples from the logits on the host: use run()");
}

}  // namespace k3
