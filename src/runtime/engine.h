// The engine: a checkpoint bound for a device plus the sequences it serves. step() runs the next
// tokens of several sequences (each of any length: a prompt prefill, a continuation, or one decode
// token) in one batched forward call — the API the server uses. The Engine validates requests,
// keeps sequence lengths and block tables (the paged MLA cache's block ids, runtime/block_pool.h,
// allocated as sequences grow and released when they end) and the ids of KDA state snapshots; an
// Executor holds the bound weights, the cache memory and each sequence's state (the CPU executor
// runs backend/cpu/forward.cpp on the CPU backend; the CUDA one lives in backend/cuda/executor/).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_linear.h"
#include "backend/executor.h"
#include "runtime/block_pool.h"
#include "runtime/cpu_executor.h"
#include "quant/families/family.h"

namespace k3 {

// The most OpenMP threads an Engine accepts: kMaxThreadsPerHardwareThread × the hardware threads.
inline constexpr int kMaxThreadsPerHardwareThread = 4;
int max_engine_threads();

// Prompt tokens per prefill step on the CPU: a long prompt runs as several steps (the sequence's
// state carries over), which bounds the activations' memory and lets a caller report progress.
inline constexpr int64_t kPrefillChunk = 256;

struct EngineOptions {
  int threads = 0;  // OpenMP threads; 0 = all cores; at most max_engine_threads()
  int64_t max_context = 0;  // tokens per sequence; 0 = no limit
  // CPU caches (a device executor sizes its own): sequences alive at once (KDA state slots), blocks
  // of the paged latent cache, KDA snapshots. 0 = defaults: kCpuDefaultSequences; enough blocks for
  // that many sequences at the full context, capped at kCpuCacheMemoryShare of available memory;
  // one snapshot per block likewise capped.
  int64_t max_sequences = 0;
  int64_t kv_blocks = 0;
  int64_t snapshot_slots = 0;
  int64_t prefill_chunk = kPrefillChunk;  // prompt tokens per prefill step (runtime/generate.h prefill())
  cpu::LinearOptions linear;
  ExecutorFactory executor;  // empty: the CPU executor
  // CPU executor: the ranks this engine is one of (parallel/ranks.h): its routed experts divided
  // among ranks.experts (backend/cpu/expert_parallel.h), the rest among ranks.tensor
  // (backend/cpu/tensor_parallel.h); one Engine per rank, every rank making the same calls in the
  // same order. Null members: that part is all here.
  ParallelRanks ranks;
  // CPU executor: above 1, the tensor-parallel part divided among `tensor_parallel` in-process ranks
  // and the routed experts among `expert_parallel` (a layout check_parallel_layout accepts) behind
  // this one engine (runtime/parallel_executor.h); results are bit-identical to 1 rank.
  int tensor_parallel = 1;
  int expert_parallel = 1;
  // With expert_parallel > 1: place the experts from this routing histogram with
  // `redundant_experts` extra copies per rank (parallel/expert_placement.h); null: contiguous.
  const RoutingHistogram* expert_histogram = nullptr;
  int redundant_experts = 0;
  // CPU executor: every routed pick is counted here (k3 … --record-routing); null: not counted.
  RoutingHistogram* routing_record = nullptr;
};

struct SequenceInput {
  int64_t sequence = 0;          // from Engine::new_sequence()
  std::vector<int64_t> tokens;   // ≥ 1 token ids in [0, vocab)
  bool all_logits = false;       // logits of every token; otherwise of the last one only
  // Only the greedy next token is needed (no logits): when every input of a step asks this, the
  // executor picks them where the logits are (on the device for CUDA) and returns no logits.
  bool argmax_only = false;
  // Sample the next token where the logits are (when the executor samples_on_device and every
  // input of the step is argmax_only or has this): StepResult::picked, no logits.
  std::optional<RowSampling> device_sample = std::nullopt;
};

struct StepResult {
  int64_t sequence = 0;
  int64_t rows = 0;              // tokens.size() or 1
  std::vector<float> logits;     // [rows][vocab]; empty when the token was picked by the executor
  int64_t picked = -1;           // the next token picked by the executor (argmax_only / device_sample)
};

// Fails (k3::Error naming `model_dir`) when `logits` ([rows][vocab], row r at sequence position
// first_position + r) holds a NaN or an infinity: a model that produced them has broken weights or
// config values, and sampling or printing them would hide that.
void require_finite_logits(std::span<const float> logits, int64_t vocab, int64_t first_position,
                           const std::string& model_dir);

class Engine {
 public:
  // Plans the checkpoint directory (any family), refuses a plan with problems, binds the weights.
  explicit Engine(const std::string& model_dir, const EngineOptions& options = {});
  // An engine over an executor made without a checkpoint (synthetic weights generated on a device,
  // for benchmarks at real shapes): no plan. options.executor is not used.
  Engine(const K3Config& config, std::unique_ptr<Executor> executor, const EngineOptions& options);
  ~Engine();

  const K3Config& config() const { return config_; }
  const LoadPlan& plan() const;  // throws for an engine without a checkpoint
  const Executor& executor() const { return *executor_; }
  bool samples_on_device() const { return executor_->samples_on_device(); }

  // A new empty sequence; throws k3::Error when every state slot is taken.
  int64_t new_sequence();
  // A sequence resuming a cached prefix of `length` tokens: `blocks` (block ids whose references
  // the caller took for it) hold its MLA rows, snapshot slot `snapshot` its KDA states (−1 for a
  // model without KDA layers). The sequence owns the block references from here on; the snapshot's
  // reference is given back once its states are copied in. On failure every reference is given back.
  int64_t new_sequence(std::vector<int32_t> blocks, int64_t length, int32_t snapshot);
  // Ends the sequence: its state slot and block references are given back.
  void free_sequence(int64_t sequence);
  int64_t sequence_length(int64_t sequence) const;  // tokens consumed so far
  const std::vector<int32_t>& sequence_blocks(int64_t sequence) const;
  int64_t live_sequences() const { return static_cast<int64_t>(sequences_.size()); }

  const CacheGeometry& caches() const { return caches_; }
  BlockPool& kv_pool() { return kv_pool_; }
  BlockPool& snapshot_pool() { return snapshot_pool_; }
  // Blocks `sequence` must still get to run `tokens` more tokens.
  int64_t blocks_needed(int64_t sequence, int64_t tokens) const;
  // Copies the sequence's KDA states into a free snapshot slot, returned with one reference for the
  // caller; −1 when none is free (or the model has no KDA layers).
  int32_t save_snapshot(int64_t sequence);
  int64_t max_context() const { return max_context_; }  // 0 = no limit
  int64_t prefill_chunk() const { return prefill_chunk_; }

  // Validates every input (known, distinct sequences; non-empty, in-vocabulary tokens; no sequence
  // past max_context; enough free cache blocks) before running anything; results come in input
  // order. Non-finite logits fail the step (require_finite_logits) after the sequences' states have
  // advanced.
  std::vector<StepResult> step(const std::vector<SequenceInput>& inputs);

 private:
  void check_options(const EngineOptions& options);
  void adopt_executor(std::unique_ptr<Executor> executor);

  K3Config config_;
  std::unique_ptr<LoadPlan> plan_;
  std::unique_ptr<PlanFiles> files_;
  std::unique_ptr<Executor> executor_;
  CacheGeometry caches_;
  BlockPool kv_pool_{0}, snapshot_pool_{0};
  struct Sequence {
    int64_t length = 0;           // tokens consumed
    std::vector<int32_t> blocks;  // block table: one reference per block
  };
  std::map<int64_t, Sequence> sequences_;
  int64_t next_id_ = 0;
  int64_t max_context_ = 0;
  int64_t prefill_chunk_ = kPrefillChunk;
};

}  // namespace k3
