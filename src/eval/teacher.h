// Teacher forcing on an Engine: each sequence (a prompt and a reply) is run through the model and
// the logits of the rows that predicted the reply's tokens (positions prompt−1 … prompt+reply−2) are
// handed back. Several sequences share each step: the prompt but its last token runs first in
// pieces (runtime/prefill_chunks.h) without logits, then the rest with every row's logits.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/engine.h"

namespace k3::eval {

struct ForcedSequence {
  std::span<const int64_t> prompt;  // ≥ 1 token
  std::span<const int64_t> reply;   // ≥ 1 token
};

struct ForcingOptions {
  int64_t max_batch_tokens = 2048;  // tokens per step (one sequence's piece may exceed it alone)
  int64_t max_logit_rows = 512;     // logit rows per step (likewise)
};

// rows: [reply.size()][vocab], row r the distribution that predicted reply[r].
using ForcedRowsSink = std::function<void(size_t index, std::span<const float> rows)>;

// Calls `sink` once per sequence, in an order of completion. Throws k3::Error when a sequence
// cannot fit the engine's context or cache, or a step fails.
void teacher_force(Engine& engine, std::span<const ForcedSequence> sequences, const ForcingOptions& options,
                   const ForcedRowsSink& sink);

}  // namespace k3::eval
