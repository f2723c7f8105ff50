// The Kimi-Linear / Kimi-K3 forward pass (spec §2), written once against the Backend interface.
// One call runs the next tokens of several sequences: `ids` holds them sequence after sequence,
// `slices` says which rows belong to which sequence (and carries each sequence's state, which the
// call advances). Returns the logits of the rows listed in `logit_rows`, in that order.
//
// Batch invariance: a token's numerics depend only on its own sequence, never on what else is in the
// call. One-token slices (decode) run every linear on the fused kernels, longer slices (prefill)
// on the tiled ones, whatever the row counts (cpu_linear.h LinearPath; both compute each row
// independently of the others); a call holding both kinds runs them as two passes. Within a
// sequence, a prefill split at multiples of kKdaChunk tokens gives the same numerics as one call
// (the KDA chunk grid stays aligned; the MLA expanded form attends row by row), as long as no piece
// is a single token (runtime/prefill_chunks.h).
#pragma once

#include <span>

#include "backend/cpu/backend.h"

namespace k3 {

// A state ready for a new sequence of this model (per-layer entries sized, no blocks yet) whose MLA
// layers keep their rows in `latent`. Before a call the caller gives the sequence blocks covering
// every position the call writes (SequenceState::blocks).
SequenceState new_sequence_state(const K3Config& config, LatentPages* latent);

Tensor forward(const K3Config& config, const ModelWeights& weights, Backend& backend, std::span<const int64_t> ids,
               std::span<const SeqSlice> slices, std::span<const int64_t> logit_rows);

}  // namespace k3
