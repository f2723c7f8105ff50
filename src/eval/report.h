// What `k3 eval` prints: a table per task (examples, correct, accuracy), the total, throughput and
// the KL summary; or the same as one JSON object; and failing examples for --verbose.
#pragma once

#include <optional>
#include <string>

#include "chat/json_text.h"
#include "eval/eval.h"

namespace k3::eval {

struct KlReport {
  std::string base;        // the base model's directory
  EvalResult base_result;  // the base's own greedy run (its scores are reported too)
  KlSummary summary;
};

struct EvalReport {
  std::string model, device;
  uint64_t seed = 0;
  EvalResult result;
  std::optional<KlReport> kl;
};

// {"model","device","seed","tasks":{name:{"n","correct","accuracy"}},"total":{…},
//  "throughput":{"seconds","generated_tokens","examples_per_s","tokens_per_s"},
//  "kl": null | {"base","positions","mean","p99","max","top1_agreement","base_tasks":{…},"base_total":{…}}}
chat::Json report_json(const EvalReport& report);

// The human-readable table, several lines ending in '\n'.
std::string report_table(const EvalReport& report);

// Up to `per_task` failing examples of each task: prompt, expected, got (the parsed content) and
// the whole reply text, as JSON strings.
std::string failures_text(const EvalResult& result, size_t per_task);

}  // namespace k3::eval
