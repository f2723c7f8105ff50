// Single-sequence generation on an Engine: one prefill of the prompt, then one decode step per
// new token, with timings for throughput reports.
#pragma once

#include <functional>
#include <vector>

#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace k3 {

struct GenerateOptions {
  int64_t max_tokens = 16;
  SamplingParams sampling;
  bool stop_at_eos = true;  // stop after emitting one of config.tokens.eos
  std::function<void(int64_t)> on_token;  // called with each generated id as soon as it is sampled
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
