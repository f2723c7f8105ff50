// How a prompt is cut into prefill steps. On the CPU a prompt gives the same numerics however it
// is cut (backend/cpu/forward.h) when every piece starts at a multiple of kPrefillAlign — the KDA
// chunk grid stays aligned to absolute positions — and no piece is a single token (one-token
// pieces run in decode form). Every caller that prefills (generate, the server's scheduler, a
// prefix-cache hit resuming mid-prompt) cuts with next_prefill_end, so their logits agree bit for bit.
#pragma once

#include <cstdint>

#include "backend/cpu/kda.h"

namespace k3 {

inline constexpr int64_t kPrefillAlign = cpu::kKdaChunk;

// The end of the next piece of the prompt tokens [done, total), about `budget` tokens long:
//   - the rest when it fits the budget;
//   - else, for a budget of at least kPrefillAlign, the most whole multiples of kPrefillAlign it
//     holds, moved back one multiple when that would leave a single token (or on to the end when
//     there is no room to move back: one token over the budget);
//   - else done + budget (a caller's own fine-grained chunking, which is not split-invariant).
// Split-invariant cutting therefore needs `done` aligned and a budget of at least
// min(total − done, kPrefillAlign). Requires 0 ≤ done < total and budget ≥ 1.
int64_t next_prefill_end(int64_t done, int64_t total, int64_t budget);

}  // namespace k3
