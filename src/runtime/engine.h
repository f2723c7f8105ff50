// The engine: a checkpoint bound for the CPU backend plus the sequences it serves. step() runs the
// next tokens of several sequences (each of any length: a prompt prefill, a continuation, or one
// decode token) in one batched forward call — the API the server uses.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "quant/families/family.h"

namespace k3 {

struct EngineOptions {
  int threads = 0;  // OpenMP threads; 0 = all cores
  cpu::LinearOptions linear;
};

struct SequenceInput {
  int64_t sequence = 0;          // from Engine::new_sequence()
  std::vector<int64_t> tokens;   // ≥ 1 token ids in [0, vocab)
  bool all_logits = false;       // logits of every token; otherwise of the last one only
};

struct StepResult {
  int64_t sequence = 0;
  int64_t rows = 0;              // tokens.size() or 1
  std::vector<float> logits;     // [rows][vocab]
};

class Engine {
 public:
  // Plans the checkpoint directory (any family), refuses a plan with problems, binds the weights.
  explicit Engine(const std::string& model_dir, const EngineOptions& options = {});
  ~Engine();

  const K3Config& config() const { return config_; }
  const LoadPlan& plan() const { return *plan_; }

  int64_t new_sequence();
  void free_sequence(int64_t sequence);
  int64_t sequence_length(int64_t sequence) const;  // tokens consumed so far

  // Validates every input (known, distinct sequences; non-empty, in-vocabulary tokens) before
  // running anything; results come in input order.
  std::vector<StepResult> step(const std::vector<SequenceInput>& inputs);

 private:
  SequenceState& state(int64_t sequence);

  K3Config config_;
  std::unique_ptr<LoadPlan> plan_;
  std::unique_ptr<PlanFiles> files_;
  ModelWeights weights_;
  std::unique_ptr<Backend> backend_;
  std::map<int64_t, SequenceState> sequences_;
  int64_t next_id_ = 0;
};

}  // namespace k3
