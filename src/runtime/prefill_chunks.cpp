#include "runtime/prefill_chunks.h"

#include "core/error.h"

namespace k3 {

int64_t next_prefill_end(int64_t done, int64_t total, int64_t budget) {
  if (done < 0 || done >= total || budget < 1) {
    throw Error("next_prefill_end: needs 0 ≤ done < total and budget ≥ 1 (done " + std::to_string(done) + ", total " +
                std::to_string(total) + ", budget " + std::to_string(budget) + ")");
  }
  if (total - done <= budget) return total;
  if (budget < kPrefillAlign) return done + budget;
  int64_t end = done + budget / kPrefillAlign * kPrefillAlign;
  if (total - end == 1) end = end - kPrefillAlign > done ? end - kPrefillAlign : total;
  return end;
}

}  // namespace k3
