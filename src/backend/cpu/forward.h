// The Kimi-Linear / Kimi-K3 forward pass (spec §2), written once against the Backend interface.
// One call runs the next tokens of several sequences: `ids` holds them sequence after sequence,
// `slices` says which rows belong to which sequence (and carries each sequence's state, which the
// call advances). Returns the logits of the rows listed in `logit_rows`, in that order.
#pragma once

#include <span>

#include "backend/cpu/backend.h"

namespace k3 {

// A state ready for a new sequence of this model (per-layer entries sized, caches empty).
SequenceState new_sequence_state(const K3Config& config);

Tensor forward(const K3Config& config, const ModelWeights& weights, Backend& backend, std::span<const int64_t> ids,
               std::span<const SeqSlice> slices, std::span<const int64_t> logit_rows);

}  // namespace k3
