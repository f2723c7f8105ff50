#include "runtime/engine.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <thread>

#include "core/error.h"
#include "runtime/cpu_executor.h"
#include "runtime/parallel_executor.h"

namespace k3 {

int max_engine_threads() {
  return kMaxThreadsPerHardwareThread * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

[[noreturn]] void throw_non_finite(const std::string& model_dir, int64_t position, const std::string& which) {
  throw Error(Where{model_dir, "", ""}, "model produced non-finite logits at position " + std::to_string(position) + which +
                                            ": check the weights and config values such as rms_norm_eps, "
                                            "routed_scaling_factor and activation_situ_beta");
}

}  // namespace

void require_finite_logits(std::span<const float> logits, int64_t vocab, int64_t first_position,
                           const std::string& model_dir) {
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isfinite(logits[i])) continue;
    const int64_t row = static_cast<int64_t>(i) / vocab, id = static_cast<int64_t>(i) % vocab;
    const char* kind = std::isnan(logits[i]) ? "NaN" : logits[i] > 0 ? "+inf" : "-inf";
    throw_non_finite(model_dir, first_position + row, std::string(" (first ") + kind + " at vocab id " + std::to_string(id) + ")");
  }
}

void Engine::check_options(const EngineOptions& options) {
  if (options.threads < 0) throw Error(Where{"", "", "threads"}, "must be ≥ 0 (0 = all cores)");
  const bool ranks_given = options.ranks.tensor || options.ranks.experts;
  if (ranks_given && options.executor) {
    throw Error(Where{"", "", "ranks"}, "tensor and expert parallelism over in-process ranks run on the CPU executor only");
  }
  check_parallel_layout({options.tensor_parallel, options.expert_parallel}, "tensor_parallel", "expert_parallel");
  if (options.expert_histogram && options.expert_parallel < 2) {
    throw Error(Where{"", "", "expert_histogram"}, "places experts among expert-parallel ranks: it needs expert_parallel > 1");
  }
  if (options.redundant_experts < 0 || options.redundant_experts > kMaxParallelRanks) {
    throw Error(Where{"", "", "redundant_experts"}, "must be in [0, " + std::to_string(kMaxParallelRanks) + "]");
  }
  if ((options.tensor_parallel > 1 || options.expert_parallel > 1) && (options.executor || ranks_given)) {
    throw Error(Where{"", "", options.tensor_parallel > 1 ? "tensor_parallel" : "expert_parallel"},
                "in-process parallelism runs on the CPU executor only, on its own ranks");
  }
  if (options.threads > max_engine_threads()) {
    throw Error(Where{"", "", "threads"}, std::to_string(options.threads) + " is more than " +
                                              std::to_string(max_engine_threads()) + " (" +
                                              std::to_string(kMaxThreadsPerHardwareThread) + " × the hardware threads)");
  }
  if (options.max_context < 0) throw Error(Where{"", "", "max_context"}, "must be ≥ 0 (0 = no limit)");
  if (options.prefill_chunk < 1) throw Error(Where{"", "", "prefill_chunk"}, "must be ≥ 1");
  for (const auto& [field, value] : {std::pair{"max_sequences", options.max_sequences}, std::pair{"kv_blocks", options.kv_blocks},
                                     std::pair{"snapshot_slots", options.snapshot_slots}}) {
    if (value < 0) throw Error(Where{"", "", field}, "must be ≥ 0 (0 = the default)");
  }
  if (options.threads > 0) omp_set_num_threads(options.threads);
}

void Engine::adopt_executor(std::unique_ptr<Executor> executor) {
  executor_ = std::move(executor);
  caches_ = executor_->caches();
  kv_pool_ = BlockPool(caches_.kv_blocks);
  snapshot_pool_ = BlockPool(caches_.snapshot_slots);
}

Engine::Engine(const std::string& model_dir, const EngineOptions& options)
    : max_context_(options.max_context), prefill_chunk_(options.prefill_chunk) {
  check_options(options);
  const CheckpointDir ckpt = open_checkpoint_dir(model_dir);
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "a model directory needs config.json");
  config_ = *ckpt.config;
  plan_ = std::make_unique<LoadPlan>(plan_checkpoint(ckpt));
  files_ = std::make_unique<PlanFiles>(*plan_);
  const CpuCacheOptions caches{options.max_sequences, options.kv_blocks, options.snapshot_slots, options.max_context};
  if (options.executor) {
    adopt_executor(options.executor(config_, *plan_, *files_));
  } else if (options.tensor_parallel > 1 || options.expert_parallel > 1) {
    const ParallelLayout layout{options.tensor_parallel, options.expert_parallel, options.expert_histogram,
                                options.redundant_experts};
    adopt_executor(make_parallel_cpu_executor(config_, *plan_, *files_, options.linear, caches, layout, options.routing_record));
  } else {
    ParallelRanks ranks = options.ranks;
    if (!ranks.routing_record) ranks.routing_record = options.routing_record;
    adopt_executor(make_cpu_executor(config_, *plan_, *files_, options.linear, caches, ranks));
  }
}

Engine::Engine(const K3Config& config, std::unique_ptr<Executor> executor, const EngineOptions& options)
    : config_(config), max_context_(options.max_context), prefill_chunk_(options.prefill_chunk) {
  check_options(options);
  adopt_executor(std::move(executor));
}

const LoadPlan& Engine::plan() const {
  if (!plan_) throw Error("this engine was made without a checkpoint (synthetic weights): it has no load plan");
  return *plan_;
}

Engine::~Engine() = default;

int64_t Engine::new_sequence() { return new_sequence({}, 0, -1); }

int64_t Engine::new_sequence(std::vector<int32_t> blocks, int64_t length, int32_t snapshot) {
  const int64_t id = next_id_;
  try {
    if (length < 0 || blocks_for(length, caches_.block_tokens) > static_cast<int64_t>(blocks.size())) {
      throw Error("a resumed sequence of " + std::to_string(length) + " tokens needs " +
                  std::to_string(blocks_for(std::max<int64_t>(length, 0), caches_.block_tokens)) + " blocks, got " +
                  std::to_string(blocks.size()));
    }
    executor_->add_sequence(id, length);
    if (snapshot >= 0) executor_->restore_snapshot(id, snapshot);
  } catch (...) {
    kv_pool_.release_all(blocks);
    if (snapshot >= 0) snapshot_pool_.release(snapshot);
    executor_->free_sequence(id);  // a no-op when add_sequence failed
    throw;
  }
  if (snapshot >= 0) snapshot_pool_.release(snapshot);
  sequences_.emplace(id, Sequence{length, std::move(blocks)});
  return next_id_++;
}

void Engine::free_sequence(int64_t sequence) {
  auto it = sequences_.find(sequence);
  if (it == sequences_.end()) throw Error("unknown sequence " + std::to_string(sequence));
  kv_pool_.release_all(it->second.blocks);
  sequences_.erase(it);
  executor_->free_sequence(sequence);
}

int64_t Engine::sequence_length(int64_t sequence) const {
  auto it = sequences_.find(sequence);
  if (it == sequences_.end()) throw Error("unknown sequence " + std::to_string(sequence));
  return it->second.length;
}

const std::vector<int32_t>& Engine::sequence_blocks(int64_t sequence) const {
  auto it = sequences_.find(sequence);
  if (it == sequences_.end()) throw Error("unknown sequence " + std::to_string(sequence));
  return it->second.blocks;
}

int64_t Engine::blocks_needed(int64_t sequence, int64_t tokens) const {
  const Sequence& s = sequences_.at(sequence);
  return std::max<int64_t>(0, blocks_for(s.length + tokens, caches_.block_tokens) - static_cast<int64_t>(s.blocks.size()));
}

int32_t Engine::save_snapshot(int64_t sequence) {
  if (!sequences_.contains(sequence)) throw Error("unknown sequence " + std::to_string(sequence));
  const std::optional<int32_t> id = snapshot_pool_.allocate();
  if (!id) return -1;
  executor_->save_snapshot(sequence, *id);
  return *id;
}

std::vector<StepResult> Engine::step(const std::vector<SequenceInput>& inputs) {
  std::vector<int64_t> ids, logit_rows;
  std::vector<BatchSlice> slices;
  std::set<int64_t> seen;
  int64_t new_blocks = 0;
  for (const SequenceInput& in : inputs) {
    if (!sequences_.contains(in.sequence)) throw Error("unknown sequence " + std::to_string(in.sequence));
    if (!seen.insert(in.sequence).second) throw Error("sequence " + std::to_string(in.sequence) + " appears twice in one step");
    if (in.tokens.empty()) throw Error("sequence " + std::to_string(in.sequence) + ": no tokens to run");
    for (int64_t id : in.tokens) {
      if (id < 0 || id >= config_.vocab_size) {
        throw Error("token id " + std::to_string(id) + " is out of range [0, " + std::to_string(config_.vocab_size) + ")");
      }
    }
    const int64_t row0 = static_cast<int64_t>(ids.size()), n = static_cast<int64_t>(in.tokens.size());
    const int64_t length = sequences_.at(in.sequence).length;
    if (max_context_ > 0 && n > max_context_ - length) {
      throw Error(Where{"", "", "max_context"}, "sequence " + std::to_string(in.sequence) + " would hold " +
                                                    std::to_string(length + n) + " tokens, over the context limit of " +
                                                    std::to_string(max_context_));
    }
    new_blocks += blocks_needed(in.sequence, n);
    slices.push_back({in.sequence, row0, n, &sequences_.at(in.sequence).blocks});
    ids.insert(ids.end(), in.tokens.begin(), in.tokens.end());
    for (int64_t t = in.all_logits ? 0 : n - 1; t < n; ++t) logit_rows.push_back(row0 + t);
  }
  if (new_blocks > kv_pool_.free_count()) {
    throw Error(Where{"", "", "kv_blocks"}, "the step needs " + std::to_string(new_blocks) + " more cache blocks, " +
                                                std::to_string(kv_pool_.free_count()) + " of " +
                                                std::to_string(kv_pool_.capacity()) + " are free");
  }
  for (const BatchSlice& s : slices) {
    if (!kv_pool_.allocate(blocks_needed(s.sequence, s.n), sequences_.at(s.sequence).blocks)) throw Error("kv_pool: allocation failed");
  }
  std::vector<StepResult> results;
  if (inputs.empty()) return results;
  const std::string model_dir = std::filesystem::path(config_.file).parent_path().string();
  const bool argmax = std::all_of(inputs.begin(), inputs.end(), [](const SequenceInput& in) { return in.argmax_only && !in.all_logits; });
  const bool device = executor_->samples_on_device() &&
                      std::all_of(inputs.begin(), inputs.end(), [](const SequenceInput& in) {
                        return !in.all_logits && (in.argmax_only || in.device_sample.has_value());
                      });
  if (argmax || device) {
    std::vector<RowSampling> rows;
    for (const SequenceInput& in : inputs) rows.push_back(in.device_sample ? *in.device_sample : RowSampling{});
    const std::vector<int64_t> picks =
        argmax ? executor_->run_argmax(ids, slices, logit_rows) : executor_->run_sample(ids, slices, logit_rows, rows);
    for (const BatchSlice& s : slices) sequences_[s.sequence].length += s.n;
    for (size_t i = 0; i < inputs.size(); ++i) {
      StepResult r;
      r.sequence = inputs[i].sequence;
      r.rows = 1;
      r.picked = picks[i];
      if (r.picked < 0) throw_non_finite(model_dir, sequences_[r.sequence].length - 1, "");
      results.push_back(std::move(r));
    }
    return results;
  }
  const Tensor logits = executor_->run(ids, slices, logit_rows);
  for (const BatchSlice& s : slices) sequences_[s.sequence].length += s.n;
  int64_t row = 0;
  for (const SequenceInput& in : inputs) {
    StepResult r;
    r.sequence = in.sequence;
    r.rows = in.all_logits ? static_cast<int64_t>(in.tokens.size()) : 1;
    r.logits.assign(logits.row(row), logits.row(row) + r.rows * logits.cols);
    require_finite_logits(r.logits, logits.cols, sequences_[in.sequence].length - r.rows, model_dir);
    row += r.rows;
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace k3
