#include "runtime/engine.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <thread>

#include "backend/cpu/forward.h"

namespace k3 {
namespace {

// forward() over the CPU backend, with each sequence's state in host memory.
class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const K3Config& config, const LoadPlan& plan, PlanFiles& files, const cpu::LinearOptions& linear)
      : config_(config), weights_(bind_weights(config, plan, files, linear)), backend_(make_cpu_backend()) {}

  void add_sequence(int64_t sequence) override { states_.emplace(sequence, new_sequence_state(config_)); }
  void free_sequence(int64_t sequence) override { states_.erase(sequence); }
  Tensor run(std::span<const int64_t> ids, std::span<const BatchSlice> slices, std::span<const int64_t> logit_rows) override {
    std::vector<SeqSlice> seq;
    for (const BatchSlice& s : slices) seq.push_back({s.row0, s.n, &states_.at(s.sequence)});
    return forward(config_, weights_, *backend_, ids, seq, logit_rows);
  }

 private:
  const K3Config config_;
  ModelWeights weights_;
  std::unique_ptr<Backend> backend_;
  std::map<int64_t, SequenceState> states_;
};

}  // namespace

int max_engine_threads() {
  return kMaxThreadsPerHardwareThread * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void require_finite_logits(std::span<const float> logits, int64_t vocab, int64_t first_position,
                           const std::string& model_dir) {
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isfinite(logits[i])) continue;
    const int64_t row = static_cast<int64_t>(i) / vocab, id = static_cast<int64_t>(i) % vocab;
    const char* kind = std::isnan(logits[i]) ? "NaN" : logits[i] > 0 ? "+inf" : "-inf";
    throw Error(Where{model_dir, "", ""},
                "model produced non-finite logits at position " + std::to_string(first_position + row) + " (first " +
                    kind + " at vocab id " + std::to_string(id) +
                    "): check the weights and config values such as rms_norm_eps, routed_scaling_factor and "
                    "activation_situ_beta");
  }
}

Engine::Engine(const std::string& model_dir, const EngineOptions& options) : max_context_(options.max_context), prefill_chunk_(options.prefill_chunk) {
  if (options.threads < 0) throw Error(Where{"", "", "threads"}, "must be ≥ 0 (0 = all cores)");
  if (options.threads > max_engine_threads()) {
    throw Error(Where{"", "", "threads"}, std::to_string(options.threads) + " is more than " +
                                              std::to_string(max_engine_threads()) + " (" +
                                              std::to_string(kMaxThreadsPerHardwareThread) + " × the hardware threads)");
  }
  if (options.max_context < 0) throw Error(Where{"", "", "max_context"}, "must be ≥ 0 (0 = no limit)");
  if (options.prefill_chunk < 1) throw Error(Where{"", "", "prefill_chunk"}, "must be ≥ 1");
  if (options.threads > 0) omp_set_num_threads(options.threads);
  const CheckpointDir ckpt = open_checkpoint_dir(model_dir);
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "a model directory needs config.json");
  config_ = *ckpt.config;
  plan_ = std::make_unique<LoadPlan>(plan_checkpoint(ckpt));
  files_ = std::make_unique<PlanFiles>(*plan_);
  executor_ = options.executor ? options.executor(config_, *plan_, *files_)
                              : std::make_unique<CpuExecutor>(config_, *plan_, *files_, options.linear);
}

Engine::~Engine() = default;

int64_t Engine::new_sequence() {
  executor_->add_sequence(next_id_);
  lengths_.emplace(next_id_, 0);
  return next_id_++;
}

void Engine::free_sequence(int64_t sequence) {
  if (lengths_.erase(sequence) == 0) throw Error("unknown sequence " + std::to_string(sequence));
  executor_->free_sequence(sequence);
}

int64_t Engine::sequence_length(int64_t sequence) const {
  auto it = lengths_.find(sequence);
  if (it == lengths_.end()) throw Error("unknown sequence " + std::to_string(sequence));
  return it->second;
}

std::vector<StepResult> Engine::step(const std::vector<SequenceInput>& inputs) {
  std::vector<int64_t> ids, logit_rows;
  std::vector<BatchSlice> slices;
  std::set<int64_t> seen;
  for (const SequenceInput& in : inputs) {
    if (!lengths_.contains(in.sequence)) throw Error("unknown sequence " + std::to_string(in.sequence));
    if (!seen.insert(in.sequence).second) throw Error("sequence " + std::to_string(in.sequence) + " appears twice in one step");
    if (in.tokens.empty()) throw Error("sequence " + std::to_string(in.sequence) + ": no tokens to run");
    for (int64_t id : in.tokens) {
      if (id < 0 || id >= config_.vocab_size) {
        throw Error("token id " + std::to_string(id) + " is out of range [0, " + std::to_string(config_.vocab_size) + ")");
      }
    }
    const int64_t row0 = static_cast<int64_t>(ids.size()), n = static_cast<int64_t>(in.tokens.size());
    if (max_context_ > 0 && n > max_context_ - lengths_.at(in.sequence)) {
      throw Error(Where{"", "", "max_context"}, "sequence " + std::to_string(in.sequence) + " would hold " +
                                                    std::to_string(lengths_.at(in.sequence) + n) +
                                                    " tokens, over the context limit of " + std::to_string(max_context_));
    }
    slices.push_back({in.sequence, row0, n});
    ids.insert(ids.end(), in.tokens.begin(), in.tokens.end());
    for (int64_t t = in.all_logits ? 0 : n - 1; t < n; ++t) logit_rows.push_back(row0 + t);
  }
  std::vector<StepResult> results;
  if (inputs.empty()) return results;
  const Tensor logits = executor_->run(ids, slices, logit_rows);
  for (const BatchSlice& s : slices) lengths_[s.sequence] += s.n;
  const std::string model_dir = std::filesystem::path(config_.file).parent_path().string();
  int64_t row = 0;
  for (const SequenceInput& in : inputs) {
    StepResult r;
    r.sequence = in.sequence;
    r.rows = in.all_logits ? static_cast<int64_t>(in.tokens.size()) : 1;
    r.logits.assign(logits.row(row), logits.row(row) + r.rows * logits.cols);
    require_finite_logits(r.logits, logits.cols, lengths_[in.sequence] - r.rows, model_dir);
    row += r.rows;
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace k3
