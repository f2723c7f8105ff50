// What the blocks of one CUDA forward step share (internal to backend/cuda/executor/): the stream, the
// arena (step scratch is taken after the step's mark), cuBLASLt, the step's metadata on the device,
// the per-layer state and the linear-layer dispatch. Host-only header.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/executor/device_weights.h"
#include "backend/cuda/executor/op_timeline.h"
#include "backend/cuda/core/tensor.h"
#include "backend/cuda/moe/moe.h"
#include "model/config.h"

namespace k3::cuda {

// The batch of one step on the device (int32 arrays; see CudaModel::upload_meta for the layout).
// n sequences, T rows; sequence s owns rows cu_q[s]…cu_q[s+1], continues slot slots[s] and has
// seqlens[s] tokens after this step.
struct StepMeta {
  int n = 0;
  int64_t rows = 0;
  bool decode = false;        // every sequence runs exactly one token
  int max_q = 0, max_kv = 0;  // host bounds of the per-sequence new and total lengths
  int64_t kv_rows = 0;        // Σ seqlens (the prefill's gathered latent rows)
  const int32_t* ids = nullptr;          // [T] token ids
  const int32_t* cu_q = nullptr;         // [n + 1]
  const int32_t* slots = nullptr;        // [n]
  const int32_t* seqlens = nullptr;      // [n]
  const int32_t* cache_dst = nullptr;    // [T]: each new token's row in a layer's latent cache
  const int32_t* cu_kv = nullptr;        // [n + 1]: prefix sums of seqlens
  const int32_t* kv_src = nullptr;       // [kv_rows]: cache rows of every sequence's whole context
  const int32_t* block_table = nullptr;  // [n][pages_per_slot]
  const int32_t* logit_rows = nullptr;   // rows whose logits the step returns
  int64_t block_table_ld = 0;
};

struct LayerState {
  KdaStatePool kda;     // KDA layers
  float* snapshot_recurrent = nullptr;  // KDA layers: snapshot slots of the recurrent and conv state
  float* snapshot_conv = nullptr;
  DeviceTensor cache;   // MLA layers: bf16 [kv_blocks · page_size, r + d_rope] latent rows [c | k_pe], paged
};

// The dispatch of every row to one expert that a dense linear in bank form runs over (bank_linear.h)
// depends on the row count alone: a step keeps one per count its linears see (its T rows, its logit
// rows), laid out before the first block so that it lasts the step, written on the step's stream by
// its first user and read by the rest.
class OneExpertDispatches {
 public:
  void lay_out(Arena& arena, int64_t rows, int64_t logit_rows);
  // The dispatch for `rows` rows (written on `stream` if this is its first use), or nullptr when none
  // was laid out for that count.
  const MoeDispatch* get(int64_t rows, cudaStream_t stream);

 private:
  struct Entry {
    MoeDispatch d;
    bool written = false;
  };
  std::array<Entry, 2> entries_{};
  int count_ = 0;
};

// Forms of a block's input rows that several of its linears make alike (a format's quantised
// activations: KDA's q, k, v, f_a, β and g projections all read the block's input): made by the first
// linear that needs a form, read by the next ones. The block (BlockOps) names its input — rows it does
// not write while it runs — and its Scope restores the state it found, so a form goes with the arena
// memory it lives in. Forms of other rows are fresh step scratch each time.
class SharedInputForms {
 public:
  struct State {
    DeviceTensor rows;
    int count = 0;
  };
  struct Form {
    void* data = nullptr;
    bool ready = false;  // an earlier linear made it; else the caller writes it now
  };
  // From now on x is the input whose forms are kept (a new input drops the forms of the last).
  void share(const DeviceTensor& x);
  State state() const { return {rows_, count_}; }
  void restore(const State& s) { rows_ = s.rows, count_ = s.count; }
  // `bytes` of memory for form `key` of rows x (a format's own tag for the form's layout): the kept
  // form, or fresh arena memory, kept when x is the shared input.
  Form get(Arena& arena, const DeviceTensor& x, int64_t key, size_t bytes, const char* what);
  // The bookkeeping under get: the kept form `key` of x, or nullptr; keeps `data` (ending at arena
  // mark `end`) as that form where x is the shared input and there is room, and says whether it did.
  void* find(const DeviceTensor& x, int64_t key) const;
  bool keep(const DeviceTensor& x, int64_t key, void* data, size_t end);
  // The arena mark a linear must not give memory back below: the end of the newest kept form, or 0.
  size_t floor() const { return count_ > 0 ? entries_[static_cast<size_t>(count_ - 1)].end : 0; }

 private:
  struct Entry {
    int64_t key = 0;
    void* data = nullptr;
    size_t end = 0;
  };
  DeviceTensor rows_;
  std::array<Entry, 4> entries_{};
  int count_ = 0;
};

class ExpertStream;  // expert_stream.h
class CpuExperts;    // cpu_experts.h
class ExpertSubset;  // expert_subset.h
class RoutedSumAcrossRanks;  // rank_exchange.h
class HeadsAcrossRanks;      // rank_exchange.h

struct StepContext {
  const K3Config& config;
  const DeviceWeights& weights;
  std::vector<LayerState>& state;
  Arena& arena;
  Blas& blas;
  cudaStream_t stream;
  int multiprocessors = 0;
  int page_size = 64;
  StepMeta meta;
  MlaDecodeKernel mla_decode = MlaDecodeKernel::kAuto;
  ExpertStream* experts = nullptr;  // expert streaming (--expert-cache): the routed experts' slot banks
  // The routed experts this GPU holds when it holds only some (hybrid CPU/GPU experts, expert
  // parallelism); the CPU's share of them; the expert-parallel ranks the routed sum is summed over.
  const ExpertSubset* expert_share = nullptr;
  CpuExperts* cpu_experts = nullptr;
  RoutedSumAcrossRanks* expert_ranks = nullptr;
  // The attention tensor-parallel ranks this GPU's share of the heads is gathered over (o_proj inputs).
  HeadsAcrossRanks* tensor_ranks = nullptr;
  int64_t packed_prefill_gemms = 0;   // packed bank GEMMs of this step on a prefill GEMM rather than a decode GEMV
  OpTimeline* timeline = nullptr;     // per-op-class profiling of this step, or none
  OneExpertDispatches one_expert;     // laid out by the step's owner (forward), or none
  SharedInputForms input_forms;       // the current block's input (BlockOps)

  // From here on the stream's work belongs to op class `c` (profiled steps only).
  void mark(OpClass c) {
    if (timeline != nullptr) timeline->mark(c, stream);
  }
  // Op class `c` for the returned scope's lifetime.
  OpScope op(OpClass c) { return OpScope(timeline, c, stream); }

  // y = x·Wᵀ for every weight kind; x f32 or bf16, y f32 or bf16 (converted where a GEMM cannot). A
  // weight with a gathered input (DeviceLinear::gathered_input_unit) takes x as this rank's heads'
  // columns and all-gathers them over tensor_ranks first.
  void linear(const DeviceLinear& w, const DeviceTensor& x, const DeviceTensor& y);
  // Step scratch (given back by the caller's arena.reset).
  DeviceTensor scratch(DType dtype, int64_t rows, int64_t cols, const char* what) {
    return arena.alloc_tensor(dtype, rows, cols, what);
  }
};

// The blocks (kda_block.cpp, mla_block.cpp, ffn_block.cpp): x bf16 [T, hidden] normed rows, out f32
// [T, hidden] allocated by the caller. Temporaries come from the arena and are given back inside.
void kda_block(StepContext& ctx, int64_t layer, const DeviceKda& w, const DeviceTensor& x, const DeviceTensor& out);
void mla_block(StepContext& ctx, int64_t layer, const DeviceMla& w, const DeviceTensor& x, const DeviceTensor& out);
void moe_block(StepContext& ctx, int64_t layer, const DeviceMoe& w, const DeviceTensor& x, const DeviceTensor& out);
void mlp_block(StepContext& ctx, const DeviceMlp& w, const DeviceTensor& x, const DeviceTensor& out);

// Whether the MLA dims are the fast kernels' (mla.h); others run the generic attention.
bool mla_fast_geometry(const MlaConfig& m);

}  // namespace k3::cuda
