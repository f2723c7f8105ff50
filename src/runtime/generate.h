// Single-sequence generation on an Engine: one prefill of the prompt, then one decode step per
// new token, with timings for throughput reports.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "runtime/token_constraint.h"

namespace k3 {

// Called after each prefill step with the prompt tokens done so far and the prompt's length.
using PrefillProgress = std::function<void(int64_t done, int64_t total)>;

// Runs `prompt` on `sequence` in steps of about `chunk` tokens (0: the engine's prefill_chunk()),
// cut by next_prefill_end (runtime/prefill_chunks.h).
// Returns the logits of every prompt token when all_logits, else of the last one. Throws k3::Error
// (field 'max_context') before any work when the prompt does not fit the engine's context limit.
StepResult prefill(Engine& engine, int64_t sequence, const std::vector<int64_t>& prompt, bool all_logits,
                   const PrefillProgress& progress = {}, int64_t chunk = 0);

// Throws k3::Error (field `field`) naming the lengths when prompt_tokens + max_tokens exceed
// `limit` (0: no limit).
void check_context(int64_t limit, int64_t prompt_tokens, int64_t max_tokens, const std::string& field);

struct GenerateOptions {
  int64_t max_tokens = 16;
  SamplingParams sampling;
  bool stop_at_eos = true;  // stop after emitting one of config.tokens.eos
  std::function<void(int64_t)> on_token;  // called with each generated id as soon as it is sampled
  PrefillProgress on_prefill;              // called after each prefill step
  // Restricts every generated token (runtime/token_constraint.h); its mask is computed while a
  // device runs the forward pass (before it on the CPU backend).
  std::shared_ptr<TokenConstraint> constraint;
};

struct GenerateResult {
  std::vector<int64_t> ids;      // generated tokens (the prompt excluded)
  double prefill_seconds = 0;    // the prompt's forward (yields the first token)
  double decode_seconds = 0;     // the forwards of the following tokens
  int64_t decode_steps = 0;      // forwards after the prefill (= ids.size() − 1 when ids is not empty)
  bool stopped_at_eos = false;
};

GenerateResult generate(Engine& engine, const std::vector<int64_t>& prompt, const GenerateOptions& options);

}  // namespace k3
