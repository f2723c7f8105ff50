// `k3 eval`'s run: the held-out examples of the chosen tasks (eval/tasks.h) through a model's chat
// format (eval/chat_reply.h), decoded greedily in batches (eval/greedy.h) and scored by exact match
// of the parsed content; optionally the distance of the model's next-token distributions from a
// base model's along the base's own replies (eval/kl.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "eval/chat_reply.h"
#include "eval/kl.h"
#include "eval/tasks.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace k3::eval {

inline constexpr int64_t kMaxExamplesPerTask = 100000;

struct EvalOptions {
  std::vector<Task> tasks{std::begin(kAllTasks), std::end(kAllTasks)};
  int64_t n = 100;  // examples per task, 1 … kMaxExamplesPerTask
  uint64_t seed = 0;
  int64_t max_batch_tokens = 2048;  // tokens per scheduler or forcing step
};

// The examples of every task in options.tasks, task after task. Throws k3::Error (field '--n') for
// n outside [1, kMaxExamplesPerTask].
std::vector<Example> make_eval_examples(const EvalOptions& options);

struct ExampleResult {
  std::vector<int64_t> prompt, reply;  // ids; the reply ends with its stop id when it stopped
  std::string text;                    // the reply decoded with special tokens kept
  std::string content;                 // its parsed content
  bool correct = false;
};

// The compare step: the reply decoded with special tokens kept, parsed by the format's output
// parser, its content equal to `answer` byte for byte.
ExampleResult score_reply(const Tokenizer& tokenizer, ChatFormat format, std::vector<int64_t> reply, const std::string& answer);

struct TaskScore {
  std::string task;  // a task name, or "total"
  int64_t n = 0, correct = 0;
  double accuracy() const { return n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : 0.0; }
};

struct EvalResult {
  std::vector<Example> examples;
  std::vector<ExampleResult> results;  // per example
  std::vector<TaskScore> scores;       // per task in order, then the total
  double seconds = 0;                  // greedy decoding's wall time
  int64_t generated_tokens = 0;
};

// Runs every example on `engine` (which must hold no other sequences).
EvalResult run_eval(Engine& engine, const Tokenizer& tokenizer, std::vector<Example> examples, const EvalOptions& options);

// KL of `model` against `base` along the replies of `base_result` (run_eval on the base engine).
KlSummary kl_against_base(Engine& base, const EvalResult& base_result, Engine& model, const EvalOptions& options);

}  // namespace k3::eval
