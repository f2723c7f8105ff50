// Greedy decoding of many prompts at once on an Engine through the serving scheduler
// (runtime/scheduler.h: continuous batching, chunked prefill; no prefix cache). Each prompt runs
// until one of the stop ids (reported as the reply's last token) or its token cap.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/engine.h"

namespace k3::eval {

struct DecodeJob {
  std::vector<int64_t> prompt;
  int64_t max_tokens = 1;
};

struct DecodeRun {
  std::vector<std::vector<int64_t>> replies;  // per job, in job order
  double seconds = 0;                          // wall time of the whole run
  int64_t generated_tokens = 0;
};

// Throws k3::Error when a job cannot run (prompt plus cap over the context or the cache: the
// scheduler's message) or a step fails.
DecodeRun greedy_decode(Engine& engine, std::span<const DecodeJob> jobs, const std::vector<int64_t>& stop_ids,
                        int64_t max_batch_tokens);

}  // namespace k3::eval
