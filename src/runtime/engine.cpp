#include "runtime/engine.h"

#include <omp.h>

#include <set>

#include "model/forward.h"

namespace k3 {

Engine::Engine(const std::string& model_dir, const EngineOptions& options) {
  if (options.threads < 0) throw Error(Where{"", "", "threads"}, "must be ≥ 0 (0 = all cores)");
  if (options.threads > 0) omp_set_num_threads(options.threads);
  const CheckpointDir ckpt = open_checkpoint_dir(model_dir);
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "a model directory needs config.json");
  config_ = *ckpt.config;
  plan_ = std::make_unique<LoadPlan>(plan_checkpoint(ckpt));
  files_ = std::make_unique<PlanFiles>(*plan_);
  weights_ = bind_weights(config_, *plan_, *files_, options.linear);
  backend_ = make_cpu_backend();
}

Engine::~Engine() = default;

int64_t Engine::new_sequence() {
  sequences_.emplace(next_id_, new_sequence_state(config_));
  return next_id_++;
}

void Engine::free_sequence(int64_t sequence) {
  if (sequences_.erase(sequence) == 0) throw Error("unknown sequence " + std::to_string(sequence));
}

SequenceState& Engine::state(int64_t sequence) {
  auto it = sequences_.find(sequence);
  if (it == sequences_.end()) throw Error("unknown sequence " + std::to_string(sequence));
  return it->second;
}

int64_t Engine::sequence_length(int64_t sequence) const {
  auto it = sequences_.find(sequence);
  if (it == sequences_.end()) throw Error("unknown sequence " + std::to_string(sequence));
  return it->second.length;
}

std::vector<StepResult> Engine::step(const std::vector<SequenceInput>& inputs) {
  std::vector<int64_t> ids, logit_rows;
  std::vector<SeqSlice> slices;
  std::set<int64_t> seen;
  for (const SequenceInput& in : inputs) {
    SequenceState& st = state(in.sequence);
    if (!seen.insert(in.sequence).second) throw Error("sequence " + std::to_string(in.sequence) + " appears twice in one step");
    if (in.tokens.empty()) throw Error("sequence " + std::to_string(in.sequence) + ": no tokens to run");
    for (int64_t id : in.tokens) {
      if (id < 0 || id >= config_.vocab_size) {
        throw Error("token id " + std::to_string(id) + " is out of range [0, " + std::to_string(config_.vocab_size) + ")");
      }
    }
    const int64_t row0 = static_cast<int64_t>(ids.size()), n = static_cast<int64_t>(in.tokens.size());
    slices.push_back({row0, n, &st});
    ids.insert(ids.end(), in.tokens.begin(), in.tokens.end());
    for (int64_t t = in.all_logits ? 0 : n - 1; t < n; ++t) logit_rows.push_back(row0 + t);
  }
  std::vector<StepResult> results;
  if (inputs.empty()) return results;
  const Tensor logits = forward(config_, weights_, *backend_, ids, slices, logit_rows);
  int64_t row = 0;
  for (const SequenceInput& in : inputs) {
    StepResult r;
    r.sequence = in.sequence;
    r.rows = in.all_logits ? static_cast<int64_t>(in.tokens.size()) : 1;
    r.logits.assign(logits.row(row), logits.row(row) + r.rows * logits.cols);
    row += r.rows;
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace k3
