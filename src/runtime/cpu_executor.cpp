#include "runtime/cpu_executor.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <string>

#include "backend/cpu/forward.h"
#include "backend/cpu/tensor_parallel.h"
#include "core/error.h"
#include "parallel/sharding.h"
#include "runtime/block_pool.h"

namespace k3 {
namespace {

constexpr int64_t kBlockTokens = 64;
constexpr int64_t kFallbackContext = 4096;  // a config without max_position_embeddings

// MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read.
uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

std::vector<int64_t> mla_index(const K3Config& c) {
  std::vector<int64_t> index(static_cast<size_t>(c.num_layers), -1);
  int64_t next = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.is_kda(l)) index[static_cast<size_t>(l)] = next++;
  }
  return index;
}

// An expert-parallel rank's routed experts (every expert without ranks).
ExpertFilter my_experts(const K3Config& config, ParallelRanks ranks) {
  if (!ranks.experts || !config.moe) return {};
  const int rank = ranks.experts->rank(), size = ranks.experts->size();
  if (ranks.placement) {
    const ExpertPlacement* placement = ranks.placement;
    return [placement, rank](int64_t layer, int64_t e) { return placement->holds(rank, layer, e); };
  }
  const IndexRange mine = split_range(config.moe->num_experts, size, rank);
  return [mine](int64_t, int64_t e) { return e >= mine.first && e < mine.end(); };
}

// The config a rank's blocks run with: its share of the heads under tensor parallelism.
K3Config rank_config(const K3Config& config, const Communicator* tensor) {
  return tensor ? cpu::tensor_parallel_config(config, tensor->size(), tensor->rank()) : config;
}

// The weights of a rank: its routed experts (expert parallelism), its share of the rest (tensor
// parallelism); bound here, or views of `bound`.
ModelWeights bind_rank_weights(const K3Config& config, const LoadPlan& plan, PlanFiles& files, const cpu::LinearOptions& linear,
                               ParallelRanks ranks, const ModelWeights* bound) {
  ModelWeights w = bound ? view_weights(*bound, my_experts(config, ranks))
                         : bind_weights(config, plan, files, linear, my_experts(config, ranks));
  if (ranks.tensor) cpu::shard_tensor_parallel(config, w, *ranks.tensor);
  return w;
}

class CpuExecutor final : public Executor {
 public:
  // `config` is the model's; the blocks run with rank_config(config) (the per-sequence state follows it).
  CpuExecutor(const K3Config& config, const LoadPlan& plan, PlanFiles& files, const cpu::LinearOptions& linear,
              const CacheGeometry& geometry, ParallelRanks ranks, const ModelWeights* bound)
      : config_(rank_config(config, ranks.tensor)), vocab_(config.vocab_size), ranks_(ranks), geometry_(geometry),
        weights_(bind_rank_weights(config, plan, files, linear, ranks, bound)),
        backend_(make_cpu_backend(config, ranks)),
        pages_(geometry.kv_blocks, geometry.block_tokens, config.mla.kv_lora_rank + config.mla.qk_rope_head_dim,
               mla_index(config)),
        slots_(geometry.state_slots), snapshots_(static_cast<size_t>(geometry.snapshot_slots)) {}

  CacheGeometry caches() const override { return geometry_; }

  void add_sequence(int64_t sequence, int64_t length) override {
    const std::optional<int32_t> slot = slots_.allocate();
    if (!slot) {
      throw Error(Where{"", "", "max_sequences"}, "all " + std::to_string(slots_.capacity()) + " sequence state slots are in use");
    }
    Running& r = running_[sequence];
    r.slot = *slot;
    r.state = new_sequence_state(config_, &pages_);
    r.state.length = length;
  }
  void free_sequence(int64_t sequence) override {
    auto it = running_.find(sequence);
    if (it == running_.end()) return;
    slots_.release(it->second.slot);
    running_.erase(it);
  }

  Tensor run(std::span<const int64_t> ids, std::span<const BatchSlice> slices, std::span<const int64_t> logit_rows) override {
    const Tensor logits = local_logits(ids, slices, logit_rows);
    return ranks_.tensor ? cpu::gather_columns(*ranks_.tensor, logits, vocab_) : logits;
  }
  std::vector<int64_t> run_argmax(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                                  std::span<const int64_t> logit_rows) override {
    if (!ranks_.tensor) return argmax_rows(local_logits(ids, slices, logit_rows));
    return cpu::argmax_vocab_split(*ranks_.tensor, local_logits(ids, slices, logit_rows), vocab_);
  }

  void save_snapshot(int64_t sequence, int32_t snapshot) override { snapshot_slot(snapshot) = running_.at(sequence).state.kda; }
  void restore_snapshot(int64_t sequence, int32_t snapshot) override {
    running_.at(sequence).state.kda = snapshot_slot(snapshot);
  }

 private:
  // The forward call; under tensor parallelism the logits of this rank's vocabulary share.
  Tensor local_logits(std::span<const int64_t> ids, std::span<const BatchSlice> slices, std::span<const int64_t> logit_rows) {
    std::vector<SeqSlice> seq;
    for (const BatchSlice& s : slices) {
      SequenceState& state = running_.at(s.sequence).state;
      state.blocks = *s.blocks;
      seq.push_back({s.row0, s.n, &state});
    }
    return forward(config_, weights_, *backend_, ids, seq, logit_rows);
  }

  std::vector<KdaLayerState>& snapshot_slot(int32_t id) {
    if (id < 0 || static_cast<size_t>(id) >= snapshots_.size()) throw Error("snapshot slot " + std::to_string(id) + " outside the pool");
    return snapshots_[static_cast<size_t>(id)];
  }

  struct Running {
    int32_t slot = -1;
    SequenceState state;
  };
  const K3Config config_;  // the rank's (rank_config)
  const int64_t vocab_;
  const ParallelRanks ranks_;
  const CacheGeometry geometry_;
  ModelWeights weights_;
  std::unique_ptr<Backend> backend_;
  LatentPages pages_;
  BlockPool slots_;
  std::map<int64_t, Running> running_;
  std::vector<std::vector<KdaLayerState>> snapshots_;
};

}  // namespace

CacheGeometry cpu_cache_geometry(const K3Config& c, const CpuCacheOptions& o) {
  CacheGeometry g;
  g.block_tokens = kBlockTokens;
  const int64_t kda_layers = c.count(MixerKind::kKda), mla_layers = c.num_layers - kda_layers;
  g.kv_block_bytes = static_cast<uint64_t>(mla_layers * kBlockTokens * (c.mla.kv_lora_rank + c.mla.qk_rope_head_dim)) * sizeof(float);
  const int64_t width = c.kda.short_conv_kernel_size;
  g.state_bytes = static_cast<uint64_t>(kda_layers * (c.kda.num_heads * c.kda.head_dim * c.kda.head_dim +
                                                      3 * std::max<int64_t>(0, width - 1) * c.kda.projection_dim())) *
                  sizeof(float);
  g.state_slots = o.max_sequences > 0 ? o.max_sequences : kCpuDefaultSequences;
  const int64_t context = o.max_context > 0 ? o.max_context : c.max_position_embeddings.value_or(kFallbackContext);
  const uint64_t budget = static_cast<uint64_t>(static_cast<double>(available_memory()) * kCpuCacheMemoryShare) /
                          static_cast<uint64_t>(std::max<int64_t>(1, o.memory_shares));
  const auto capped = [&](int64_t want, uint64_t each) {
    if (each == 0 || budget == 0) return want;
    return std::max<int64_t>(1, std::min<int64_t>(want, static_cast<int64_t>(budget / each)));
  };
  g.kv_blocks = o.kv_blocks > 0 ? o.kv_blocks : capped(g.state_slots * blocks_for(context, kBlockTokens), g.kv_block_bytes);
  g.snapshot_slots = kda_layers == 0 ? 0 : o.snapshot_slots > 0 ? o.snapshot_slots : capped(g.kv_blocks, g.state_bytes);
  return g;
}

std::unique_ptr<Executor> make_cpu_executor(const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                                            const cpu::LinearOptions& linear, const CpuCacheOptions& caches,
                                            ParallelRanks ranks, const ModelWeights* bound) {
  const CacheGeometry geometry = cpu_cache_geometry(rank_config(config, ranks.tensor), caches);
  return std::make_unique<CpuExecutor>(config, plan, files, linear, geometry, ranks, bound);
}

}  // namespace k3
