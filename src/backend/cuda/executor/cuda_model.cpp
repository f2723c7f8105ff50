#include "backend/cuda/executor/cuda_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <type_traits>

#include "backend/cuda/core/check.h"
#include "backend/cuda/attention/generic_attention.h"
#include "backend/cuda/attention/mla/mla.h"
#include "backend/cpu/tensor_parallel.h"
#include "backend/cuda/executor/cuda_format.h"
#include "backend/cuda/executor/cpu_expert_copies.h"
#include "backend/cuda/executor/cpu_experts.h"
#include "backend/cuda/executor/rank_exchange.h"
#include "backend/cuda/executor/expert_subset.h"
#include "backend/cuda/executor/expert_stream.h"
#include "backend/cuda/executor/rows.h"
#include "backend/cuda/executor/step.h"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/core/stream.h"
#include "backend/cuda/core/upload.h"
#include "parallel/sharding.h"
#include "model/block_order.h"

namespace k3::cuda {

void StepContext::linear(const DeviceLinear& w, const DeviceTensor& x, const DeviceTensor& y) {
  if (!w) throw Error("CUDA linear: the layer has no weight");
  const size_t mark = arena.mark();
  DeviceTensor xb = x;
  if (w.gathered_input_unit > 0) {
    if (tensor_ranks == nullptr) throw Error("CUDA linear: a gathered input without tensor-parallel ranks");
    xb = scratch(x.dtype, x.rows, w.k, "tensor-parallel gathered heads");
    const OpScope exchange = op(OpClass::kCommunication);
    tensor_ranks->all_gather(x, xb, w.gathered_input_unit, arena, stream);
  }
  if (w.kind == DeviceLinear::Kind::kBf16 && xb.dtype != DType::kBF16) {
    const DeviceTensor wide = xb;
    xb = scratch(DType::kBF16, wide.rows, wide.cols, "bf16 GEMM input");
    copy_rows(wide, nullptr, xb, nullptr, wide.rows, stream);
  }
  // cuBLASLt writes f32 only from the bf16 GEMM; a packed form writes bf16 that is then widened, unless
  // it writes f32 itself (DeviceLinearForm::writes_f32).
  const bool widen = w.kind == DeviceLinear::Kind::kPacked && y.dtype == DType::kF32 && !w.packed->writes_f32();
  const DeviceTensor yb = widen ? scratch(DType::kBF16, y.rows, y.cols, "packed GEMM output") : y;
  switch (w.kind) {
    case DeviceLinear::Kind::kBf16:
      if (xb.rows <= kGemvModelRows && vec8_ok(xb) && vec8_ok(w.bf16)) {
        gemv_bf16(xb, w.bf16, yb, stream);  // decode: a stream over W
      } else {
        blas.bf16(xb, w.bf16, yb, stream);
      }
      break;
    case DeviceLinear::Kind::kPacked: w.packed->gemm(*this, xb, yb); break;
    case DeviceLinear::Kind::kNone: break;
  }
  if (widen) copy_rows(yb, nullptr, y, nullptr, y.rows, stream);
  arena.reset(std::max(mark, input_forms.floor()));  // a form the linear kept stays for the block's next ones
}

namespace {

// A step activation: a view of arena memory owned by one Act at a time (block_order.h's contract).
struct Act {
  DeviceTensor t;
  Act() = default;
  Act(Act&& o) noexcept : t(o.t) { o.t = {}; }
  Act& operator=(Act&& o) noexcept {
    t = o.t;
    o.t = {};
    return *this;
  }
};

// The block order's Ops on the GPU: the residual stream and block outputs f32, normed rows bf16 (the
// GEMMs' input).
class CudaOps {
 public:
  using Act = cuda::Act;
  explicit CudaOps(StepContext& ctx) : ctx_(ctx), w_(ctx.weights) {}

  void norm(NormSite site, int64_t l, const Act& x, Act& y) {
    ctx_.mark(OpClass::kNorms);
    rms_norm(x.t, norm_weight(site, l), eps(), shaped(y, DType::kBF16), ctx_.stream);
  }
  void mix_norm(NormSite site, int64_t l, const std::vector<const Act*>& cand, Act& y) {
    std::vector<DeviceTensor> views;
    for (const Act* a : cand) views.push_back(a->t);
    ctx_.mark(OpClass::kNorms);
    attn_res_mix_norm(views, res_score(site, l), norm_weight(site, l), eps(), shaped(y, DType::kBF16), ctx_.stream);
  }
  void mixer(int64_t l, const Act& x, Act& out) {
    const DeviceLayer& lw = layer(l);
    const DeviceTensor& o = shaped(out, DType::kF32);
    ctx_.mark(ctx_.config.is_kda(l) ? OpClass::kKda : OpClass::kMla);
    if (ctx_.config.is_kda(l)) {
      kda_block(ctx_, l, lw.kda, x.t, o);
    } else {
      mla_block(ctx_, l, lw.mla, x.t, o);
    }
  }
  void ffn(int64_t l, const Act& x, Act& out) {
    const DeviceLayer& lw = layer(l);
    const DeviceTensor& o = shaped(out, DType::kF32);
    ctx_.mark(ctx_.config.is_moe(l) ? OpClass::kMoeLinears : OpClass::kDenseMlp);
    if (ctx_.config.is_moe(l)) {
      moe_block(ctx_, l, lw.moe, x.t, o);
    } else {
      mlp_block(ctx_, lw.mlp, x.t, o);
    }
  }
  void add(Act& acc, const Act& x) { add_rows(acc.t, x.t, ctx_.stream); }

 private:
  float eps() const { return static_cast<float>(ctx_.config.rms_norm_eps); }
  const DeviceLayer& layer(int64_t l) const { return w_.layers[static_cast<size_t>(l)]; }
  const float* norm_weight(NormSite site, int64_t l) const {
    if (site == NormSite::kInput) return layer(l).input_norm;
    if (site == NormSite::kPostAttention) return layer(l).post_attention_norm;
    return w_.final_norm;
  }
  const float* res_score(NormSite site, int64_t l) const {
    if (site == NormSite::kInput) return layer(l).attn_res_c;
    if (site == NormSite::kPostAttention) return layer(l).mlp_res_c;
    return w_.output_res_c;
  }
  // The Act as [rows, hidden] of `dtype`, keeping its memory when it already is.
  const DeviceTensor& shaped(Act& a, DType dtype) {
    const int64_t rows = ctx_.meta.rows, cols = ctx_.config.hidden_size;
    if (a.t.data == nullptr || a.t.dtype != dtype || a.t.rows != rows || a.t.cols != cols) {
      a.t = ctx_.arena.alloc_tensor(dtype, rows, cols, "step activation");
    }
    return a.t;
  }

  StepContext& ctx_;
  const DeviceWeights& w_;
};

// The arena kept free for a step's workspace when the latent cache is sized from memory:
// kStepReserveShare of what the weights and states left, at most kStepReserveMax.
constexpr double kStepReserveShare = 0.15;
constexpr size_t kStepReserveMax = size_t{4} << 30;

size_t parse_memory(const CudaOptions& o) {
  size_t free_bytes = 0, total = 0;
  K3_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return parse_arena_size(o.memory, free_bytes, "--gpu-memory");
}

void check_options(const CudaOptions& o) {
  auto bad = [](const char* flag, const std::string& why) { throw Error(Where{"", "", flag}, why); };
  if (o.max_sequences < 1 || o.max_sequences > 4096) bad("--max-sequences", "must be in [1, 4096]");
  if (o.max_context < kMlaDecodeTile || o.max_context % kMlaDecodeTile != 0) {
    bad("--max-context", "must be a positive multiple of " + std::to_string(kMlaDecodeTile));
  }
  if (o.max_step_tokens < 1) bad("--max-step-tokens", "must be ≥ 1");
  if (o.kv_blocks < 0) bad("--kv-blocks", "must be ≥ 0 (0 = every sequence at the full context)");
  if (o.snapshot_slots < 0) bad("--snapshot-slots", "must be ≥ 0");
  if (o.experts_on_cpu < 0) bad("--experts-on-cpu", "must be ≥ 0");
  if (o.experts_on_cpu > 0 && o.expert_cache_bytes > 0) {
    bad("--experts-on-cpu", "and --expert-cache are two places for the experts the GPU does not hold: choose one");
  }
}

// What the CUDA kernels can run: any KDA head dim and MLA per-head width up to the generic kernels'
// limit (the fast kernels take the Kimi-K3 / Kimi-Linear geometry), row widths in whole 16-byte
// vectors.
void check_geometry(const K3Config& c) {
  auto need = [&](const char* field, int64_t have, bool ok, const char* rule) {
    if (!ok) throw Error(Where{c.file, "", field}, "is " + std::to_string(have) + "; the CUDA backend needs " + rule);
  };
  auto width = [&](const char* field, int64_t have) {
    need(field, have, have >= 0 && have <= kGenericMaxHeadDim, "at most 128 (generic kernels)");
  };
  width("linear_attn_config.head_dim", c.kda.head_dim);
  width("qk_nope_head_dim", c.mla.qk_nope_head_dim);
  width("qk_rope_head_dim", c.mla.qk_rope_head_dim);
  width("v_head_dim", c.mla.v_head_dim);
  for (const auto& [field, value] : {std::pair{"hidden_size", c.hidden_size}, std::pair{"kv_lora_rank", c.mla.kv_lora_rank},
                                     std::pair{"qk_rope_head_dim", c.mla.qk_rope_head_dim}}) {
    need(field, value, value % 8 == 0, "a multiple of 8");
  }
}

class CudaExecutor final : public Executor {
 public:
  // The weights into the arena; routed-expert banks to the sink when it is set (expert streaming).
  using WeightSource = std::function<DeviceWeights(Arena&, ExpertBankSink*)>;
  // Where only some routed experts are on this GPU: `subset` (which ones), `cpu_experts` (the CPU's
  // share, hybrid), `expert_ranks` (the other expert-parallel ranks); where only some heads are:
  // `tensor_ranks` (the ranks holding the others); else null.
  struct Share {
    std::unique_ptr<ExpertSubset> subset;
    std::unique_ptr<CpuExperts> cpu_experts;
    std::unique_ptr<RoutedSumAcrossRanks> expert_ranks;
    std::unique_ptr<HeadsAcrossRanks> tensor_ranks;
  };
  CudaExecutor(const CudaOptions& o, const K3Config& config, const WeightSource& weights, Share share = {})
      : options_(o), config_(config), device_(select(o.device)), arena_(o.device, parse_memory(o)),
        experts_(o.expert_cache_bytes > 0 ? std::make_unique<ExpertStream>(config_) : nullptr),
        share_(std::move(share)),
        weights_(weights(arena_, experts_ ? static_cast<ExpertBankSink*>(experts_.get()) : share_.subset.get())),
        blas_(arena_) {
    if (experts_) {
      experts_->allocate(arena_, o.expert_cache_bytes);
      stats_.streaming = true;
    }
    stats_.weight_bytes = weights_.backend_extras.bytes;
    if (share_.subset) {
      share_.subset->allocate(arena_, weights_);
      stats_.weight_bytes += share_.subset->device_bytes();
      stats_.gpu_expert_bytes = share_.subset->device_bytes();
    }
    for (const DeviceLayer& l : weights_.layers) {
      stats_.packed_expert_banks += l.moe.experts.w13.packed() + l.moe.experts.w2.packed();
      stats_.packed_kv_b_layers += l.mla.absorbed.packed != nullptr;
    }
    cudaDeviceProp prop{};
    K3_CUDA_CHECK(cudaGetDeviceProperties(&prop, o.device));
    multiprocessors_ = prop.multiProcessorCount;
    allocate_state();
    allocate_meta();
    for (int64_t s = options_.max_sequences - 1; s >= 0; --s) free_slots_.push_back(static_cast<int32_t>(s));
    step_mark_ = arena_.mark();
  }

  ~CudaExecutor() override {
    graphs_.clear();
    if (host_meta_ != nullptr) cudaFreeHost(host_meta_);
  }

  // The MLA latent cache is kv_blocks pages of page_size_ rows, read through the Engine's block tables.
  CacheGeometry caches() const override {
    CacheGeometry g;
    g.block_tokens = page_size_;
    g.state_slots = options_.max_sequences;
    g.kv_blocks = kv_blocks_;
    g.snapshot_slots = options_.snapshot_slots;
    g.kv_block_bytes = static_cast<uint64_t>(page_size_ * (config_.mla.kv_lora_rank + config_.mla.qk_rope_head_dim)) * 2 *
                       static_cast<uint64_t>(config_.num_layers - config_.count(MixerKind::kKda));
    for (const LayerState& st : state_) {
      if (st.kda.recurrent != nullptr) g.state_bytes += (st.kda.recurrent_floats_per_slot() + st.kda.conv_floats_per_slot()) * sizeof(float);
    }
    return g;
  }
  void save_snapshot(int64_t sequence, int32_t snapshot) override { copy_kda(sequence, snapshot, true); }
  void restore_snapshot(int64_t sequence, int32_t snapshot) override { copy_kda(sequence, snapshot, false); }

  void add_sequence(int64_t sequence, int64_t length) override {
    on_device();
    if (free_slots_.empty()) {
      throw Error(Where{"", "", "--max-sequences"}, "all " + std::to_string(options_.max_sequences) +
                                                        " sequence slots are in use; free one or raise the flag");
    }
    const int32_t slot = free_slots_.back();
    // A new sequence starts from zero KDA state (the MLA cache rows are written before they are read).
    K3_CUDA_CHECK(cudaMemcpyAsync(slot_arg_, &slot, sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    for (const LayerState& st : state_) {
      if (st.kda.recurrent != nullptr) kda_state_zero(st.kda, slot_arg_, 1, stream_);
    }
    stream_.sync();
    free_slots_.pop_back();
    sequences_[sequence] = {slot, length};
  }

  void free_sequence(int64_t sequence) override {
    auto it = sequences_.find(sequence);
    if (it == sequences_.end()) return;
    free_slots_.push_back(it->second.slot);
    sequences_.erase(it);
  }

  Tensor run(std::span<const int64_t> ids, std::span<const BatchSlice> slices, std::span<const int64_t> logit_rows) override {
    const DeviceTensor logits = step_logits(ids, slices, logit_rows);
    Tensor out(logits.rows, config_.vocab_size);
    K3_CUDA_CHECK(cudaMemcpyAsync(out.data.data(), logits.data, out.data.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream_));
    finish_step(slices);
    return out;
  }

  std::vector<int64_t> run_argmax(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                                  std::span<const int64_t> logit_rows) override {
    const DeviceTensor logits = step_logits(ids, slices, logit_rows);
    int32_t* picked = arena_.alloc_n<int32_t>(static_cast<size_t>(logits.rows), "greedy picks");
    row_argmax(logits, picked, stream_);
    std::vector<int32_t> host(static_cast<size_t>(logits.rows));
    K3_CUDA_CHECK(cudaMemcpyAsync(host.data(), picked, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    finish_step(slices);
    return std::vector<int64_t>(host.begin(), host.end());
  }

  void set_op_profiling(bool on) { profiling_ = on; }

  const CudaExecutorStats& stats() const {
    if (experts_) {
      const ExpertStreamStats& e = experts_->stats();
      stats_.cache_slots = e.slots;
      stats_.cache_bytes = e.slot_bytes;
      stats_.host_expert_bytes = e.host_bytes;
      stats_.cache_hits = e.hits;
      stats_.cache_misses = e.misses;
      stats_.cache_waves = e.waves;
      stats_.cache_passes = e.passes;
      stats_.moe_layer_calls = e.layer_calls;
      stats_.multi_wave_calls = e.multi_wave_calls;
      stats_.bytes_copied = e.bytes_copied;
      stats_.copy_seconds = e.copy_seconds;
    }
    if (share_.cpu_experts) {
      const CpuExpertStats& c = share_.cpu_experts->stats();
      stats_.cpu_experts_per_layer = c.per_layer;
      stats_.hybrid_layer_calls = c.layer_calls;
      stats_.cpu_picks = c.cpu_picks;
      stats_.gpu_picks = c.gpu_picks;
      stats_.cpu_expert_seconds = c.cpu_seconds;
      stats_.cpu_wait_seconds = c.wait_seconds;
    }
    return stats_;
  }

 private:
  struct Sequence {
    int32_t slot = 0;
    int64_t length = 0;
  };

  // The calling thread works on this executor's device (in-process ranks call from threads of their own).
  void on_device() const { K3_CUDA_CHECK(cudaSetDevice(device_)); }

  static int select(int device) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      throw Error(Where{"", "", "--device"}, "no CUDA device is available");
    }
    if (device < 0 || device >= count) {
      throw Error(Where{"", "", "--device"}, "cuda:" + std::to_string(device) + " does not exist (" + std::to_string(count) +
                                                 " device(s))");
    }
    K3_CUDA_CHECK(cudaSetDevice(device));
    return device;
  }

  bool samples_on_device() const override { return true; }

  std::vector<int64_t> run_sample(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                                  std::span<const int64_t> logit_rows, std::span<const RowSampling> sampling) override {
    if (sampling.size() != logit_rows.size()) throw Error("run_sample: one RowSampling per logit row");
    std::vector<SampleRowParams> params;
    std::vector<int32_t> offsets{0}, penalty_ids;
    std::vector<float> amounts;
    for (const RowSampling& r : sampling) {
      params.push_back({r.temperature, r.top_p, r.min_p, static_cast<float>(r.u), r.top_k, r.greedy ? 1 : 0});
      for (const auto& [id, amount] : r.penalties) {
        penalty_ids.push_back(id);
        amounts.push_back(amount);
      }
      offsets.push_back(static_cast<int32_t>(penalty_ids.size()));
    }
    const DeviceTensor logits = step_logits(ids, slices, logit_rows);
    auto upload = [&](const auto& v, const char* what) {
      using T = typename std::decay_t<decltype(v)>::value_type;
      T* d = arena_.alloc_n<T>(std::max<size_t>(1, v.size()), what);
      if (!v.empty()) K3_CUDA_CHECK(cudaMemcpyAsync(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream_));
      return d;
    };
    const SampleRowParams* d_params = upload(params, "sampling parameters");
    const int32_t* d_offsets = upload(offsets, "penalty offsets");
    const int32_t* d_ids = upload(penalty_ids, "penalty ids");
    const float* d_amounts = upload(amounts, "penalty amounts");
    int32_t* picked = arena_.alloc_n<int32_t>(static_cast<size_t>(logits.rows), "sampled tokens");
    sample_rows(logits, d_params, d_offsets, d_ids, d_amounts, picked, stream_);
    std::vector<int32_t> host(static_cast<size_t>(logits.rows));
    K3_CUDA_CHECK(cudaMemcpyAsync(host.data(), picked, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    finish_step(slices);
    return std::vector<int64_t>(host.begin(), host.end());
  }

  // The forward of one step, up to the f32 logits [L, vocab] of `logit_rows` (arena memory, valid
  // until finish_step).
  DeviceTensor step_logits(std::span<const int64_t> ids, std::span<const BatchSlice> slices,
                           std::span<const int64_t> logit_rows) {
    on_device();
    const StepMeta meta = upload_meta(ids, slices, logit_rows);
    const int64_t L = static_cast<int64_t>(logit_rows.size());
    // Graphs need every launch shape fixed per batch size: the generic MLA path's grows with the context.
    // Expert streaming, hybrid experts and expert-parallel ranks wait on the host in every MoE
    // layer, tensor-parallel ranks in every attention layer: no graphs.
    if (options_.graphs && !profiling_ && !experts_ && !share_.subset && !share_.tensor_ranks && fast_mla_ && meta.decode && L == meta.rows) {
      return replay_decode(meta);
    }
    ++stats_.eager_steps;
    return forward(meta, L);
  }

  // Waits for the step's copies back, gives the step's scratch back and advances the sequences.
  void finish_step(std::span<const BatchSlice> slices) {
    stream_.sync();
    arena_.reset(step_mark_);
    for (const BatchSlice& s : slices) sequences_.at(s.sequence).length += s.n;
  }

  // Copies every KDA layer's recurrent and conv state of the sequence's slot to snapshot slot
  // `snapshot` (save) or back.
  void copy_kda(int64_t sequence, int32_t snapshot, bool save) {
    on_device();
    if (snapshot < 0 || snapshot >= options_.snapshot_slots) {
      throw Error("snapshot slot " + std::to_string(snapshot) + " outside the " + std::to_string(options_.snapshot_slots) + " slots");
    }
    const int64_t slot = sequences_.at(sequence).slot;
    for (const LayerState& st : state_) {
      if (st.kda.recurrent == nullptr) continue;
      const size_t r = st.kda.recurrent_floats_per_slot(), c = st.kda.conv_floats_per_slot();
      float* live_r = st.kda.recurrent + slot * r;
      float* live_c = st.kda.conv + slot * c;
      float* snap_r = st.snapshot_recurrent + snapshot * r;
      float* snap_c = st.snapshot_conv + snapshot * c;
      K3_CUDA_CHECK(cudaMemcpyAsync(save ? snap_r : live_r, save ? live_r : snap_r, r * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
      K3_CUDA_CHECK(cudaMemcpyAsync(save ? snap_c : live_c, save ? live_c : snap_c, c * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    }
    stream_.sync();
  }

  void allocate_state() {
    const int64_t slots = options_.max_sequences;
    const int64_t snapshots = options_.snapshot_slots;
    for (int64_t l = 0; l < config_.num_layers; ++l) {
      LayerState& st = state_.emplace_back();
      if (config_.is_kda(l)) {
        st.kda.slots = slots;
        st.kda.heads = config_.kda.num_heads;
        st.kda.head_dim = config_.kda.head_dim;
        st.kda.conv_width = config_.kda.short_conv_kernel_size;
        st.kda.recurrent = arena_.alloc_n<float>(st.kda.recurrent_floats_per_slot() * slots, "kda recurrent state");
        st.kda.conv = arena_.alloc_n<float>(st.kda.conv_floats_per_slot() * slots, "kda conv state");
        if (snapshots > 0) {
          st.snapshot_recurrent = arena_.alloc_n<float>(st.kda.recurrent_floats_per_slot() * snapshots, "kda snapshots");
          st.snapshot_conv = arena_.alloc_n<float>(st.kda.conv_floats_per_slot() * snapshots, "kda conv snapshots");
        }
      }
    }
    // The latent cache last, sized from what the weights and states left.
    kv_blocks_ = options_.kv_blocks > 0 ? options_.kv_blocks : default_kv_blocks();
    for (int64_t l = 0; l < config_.num_layers; ++l) {
      if (config_.is_kda(l)) continue;
      state_[static_cast<size_t>(l)].cache = arena_.alloc_tensor(
          DType::kBF16, kv_blocks_ * page_size_, config_.mla.kv_lora_rank + config_.mla.qk_rope_head_dim, "mla latent cache");
    }
  }

  // Every sequence at the full context when the arena holds that beside the step workspace
  // (kStepReserveShare of what the weights and states left, at most kStepReserveMax); else as many
  // blocks as fit, at least one sequence's full context.
  int64_t default_kv_blocks() const {
    const int64_t pages_per_sequence = options_.max_context / page_size_;
    const int64_t want = options_.max_sequences * pages_per_sequence;
    const uint64_t block_bytes = caches().kv_block_bytes;
    if (block_bytes == 0) return want;
    const size_t left = arena_.capacity() - arena_.used();
    const size_t reserve = std::min<size_t>(kStepReserveMax, static_cast<size_t>(static_cast<double>(left) * kStepReserveShare));
    const int64_t fit = left > reserve ? static_cast<int64_t>((left - reserve) / block_bytes) : 0;
    if (fit >= want) return want;
    if (fit < pages_per_sequence) {
      throw Error(Where{"", "", "--gpu-memory"}, "the weights leave room for " + std::to_string(fit) + " MLA cache blocks of " +
                                                     std::to_string(page_size_) + " tokens, fewer than one sequence at --max-context " +
                                                     std::to_string(options_.max_context) + " needs");
    }
    return fit;
  }

  // The metadata region (StepMeta's arrays at fixed addresses, so that graphs can replay) and its
  // pinned host twin.
  void allocate_meta() {
    const int64_t T = options_.max_step_tokens, n = options_.max_sequences;
    pages_per_slot_ = options_.max_context / page_size_;
    meta_capacity_ = static_cast<size_t>(2 * T + 4 * (n + 1) + n * options_.max_context + n * pages_per_slot_ + T);
    device_meta_ = arena_.alloc_n<int32_t>(meta_capacity_, "step metadata");
    slot_arg_ = arena_.alloc_n<int32_t>(1, "slot argument");
    K3_CUDA_CHECK(cudaMallocHost(&host_meta_, meta_capacity_ * sizeof(int32_t)));
  }

  StepMeta upload_meta(std::span<const int64_t> ids, std::span<const BatchSlice> slices, std::span<const int64_t> logit_rows) {
    const int64_t T = static_cast<int64_t>(ids.size()), n = static_cast<int64_t>(slices.size());
    if (T > options_.max_step_tokens) {
      throw Error(Where{"", "", "--max-step-tokens"}, "a step of " + std::to_string(T) + " tokens exceeds the limit of " +
                                                          std::to_string(options_.max_step_tokens));
    }
    StepMeta m;
    m.n = static_cast<int>(n);
    m.rows = T;
    m.decode = std::all_of(slices.begin(), slices.end(), [](const BatchSlice& s) { return s.n == 1; });
    int32_t* h = host_meta_;
    size_t used = 0;
    auto take = [&](size_t count) {
      int32_t* p = h + used;
      used += count;
      return p;
    };
    int32_t* h_ids = take(T);
    int32_t* h_cu_q = take(n + 1);
    int32_t* h_slots = take(n);
    int32_t* h_seqlens = take(n);
    int32_t* h_cache_dst = take(T);
    int32_t* h_cu_kv = take(n + 1);
    int32_t* h_tables = take(n * pages_per_slot_);
    int32_t* h_logit_rows = take(logit_rows.size());
    for (int64_t t = 0; t < T; ++t) h_ids[t] = static_cast<int32_t>(ids[t]);
    h_cu_q[0] = h_cu_kv[0] = 0;
    for (int64_t s = 0; s < n; ++s) {
      const BatchSlice& sl = slices[s];
      const Sequence& seq = sequences_.at(sl.sequence);
      const int64_t after = seq.length + sl.n;
      if (after > options_.max_context) {
        throw Error(Where{"", "", "--max-context"}, "sequence " + std::to_string(sl.sequence) + " would reach " +
                                                        std::to_string(after) + " tokens; the limit is " +
                                                        std::to_string(options_.max_context));
      }
      h_cu_q[s + 1] = static_cast<int32_t>(sl.row0 + sl.n);
      h_slots[s] = seq.slot;
      h_seqlens[s] = static_cast<int32_t>(after);
      h_cu_kv[s + 1] = static_cast<int32_t>(h_cu_kv[s] + after);
      const std::vector<int32_t>& table = *sl.blocks;
      if (static_cast<int64_t>(table.size()) * page_size_ < after || static_cast<int64_t>(table.size()) > pages_per_slot_) {
        throw Error("sequence " + std::to_string(sl.sequence) + ": a block table of " + std::to_string(table.size()) +
                    " blocks for " + std::to_string(after) + " tokens");
      }
      const auto row_of = [&](int64_t position) {
        return static_cast<int32_t>(table[static_cast<size_t>(position / page_size_)] * page_size_ + position % page_size_);
      };
      for (int64_t t = 0; t < sl.n; ++t) h_cache_dst[sl.row0 + t] = row_of(seq.length + t);
      for (int64_t p = 0; p < pages_per_slot_; ++p) {
        h_tables[s * pages_per_slot_ + p] = p < static_cast<int64_t>(table.size()) ? table[static_cast<size_t>(p)] : 0;
      }
      m.max_q = std::max<int>(m.max_q, static_cast<int>(sl.n));
      m.max_kv = std::max<int>(m.max_kv, static_cast<int>(after));
    }
    for (size_t i = 0; i < logit_rows.size(); ++i) h_logit_rows[i] = static_cast<int32_t>(logit_rows[i]);
    m.kv_rows = h_cu_kv[n];
    // The expanded MLA attention (prefill, or any step with the generic geometry) gathers every
    // sequence's whole context; the absorbed decode reads the paged cache directly.
    const bool expanded = !m.decode || !fast_mla_;
    int32_t* h_kv_src = take(expanded ? static_cast<size_t>(m.kv_rows) : 0);
    if (expanded) {
      for (int64_t s = 0; s < n; ++s) {
        const std::vector<int32_t>& table = *slices[s].blocks;
        for (int32_t j = 0; j < h_seqlens[s]; ++j) {
          h_kv_src[h_cu_kv[s] + j] = static_cast<int32_t>(table[static_cast<size_t>(j / page_size_)] * page_size_ + j % page_size_);
        }
      }
    }
    K3_CUDA_CHECK(cudaMemcpyAsync(device_meta_, host_meta_, used * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    auto dev = [&](const int32_t* host_ptr) { return device_meta_ + (host_ptr - host_meta_); };
    m.ids = dev(h_ids);
    m.cu_q = dev(h_cu_q);
    m.slots = dev(h_slots);
    m.seqlens = dev(h_seqlens);
    m.cache_dst = dev(h_cache_dst);
    m.cu_kv = dev(h_cu_kv);
    m.kv_src = dev(h_kv_src);
    m.block_table = dev(h_tables);
    m.block_table_ld = pages_per_slot_;
    m.logit_rows = dev(h_logit_rows);
    return m;
  }

  // The whole forward of one step on the stream; returns the f32 logits [L, vocab] (arena memory).
  DeviceTensor forward(const StepMeta& meta, int64_t L) {
    StepContext ctx{config_, weights_, state_, arena_, blas_, stream_.get(), multiprocessors_, page_size_, meta};
    ctx.experts = experts_.get();
    ctx.expert_share = share_.subset.get();
    ctx.cpu_experts = share_.cpu_experts.get();
    ctx.expert_ranks = share_.expert_ranks.get();
    ctx.tensor_ranks = share_.tensor_ranks.get();
    ctx.timeline = profiling_ ? &timeline_ : nullptr;
    ctx.mla_decode = options_.mla_decode;
    ctx.one_expert.lay_out(arena_, meta.rows, L);
    CudaOps ops(ctx);
    Act x, normed;
    x.t = arena_.alloc_tensor(DType::kF32, meta.rows, config_.hidden_size, "embedded rows");
    ctx.mark(OpClass::kEmbedding);
    copy_rows(weights_.embed, meta.ids, x.t, nullptr, meta.rows, stream_);
    run_blocks(config_, ops, std::move(x), normed);
    const DeviceTensor picked = arena_.alloc_tensor(DType::kBF16, L, config_.hidden_size, "logit rows");
    ctx.mark(OpClass::kLmHead);
    copy_rows(normed.t, meta.logit_rows, picked, nullptr, L, stream_);
    const DeviceTensor logits = arena_.alloc_tensor(DType::kF32, L, config_.vocab_size, "logits");
    ctx.linear(weights_.lm_head, picked, logits);
    stats_.packed_prefill_gemms += ctx.packed_prefill_gemms;
    if (ctx.timeline != nullptr) {
      timeline_.end_step(stream_);
      stats_.op_seconds = timeline_.seconds;
      stats_.profiled_steps = timeline_.steps;
      stats_.touched_experts = timeline_.touched_experts;
      stats_.busiest_expert_rows = timeline_.busiest_expert_rows;
      stats_.profiled_moe_layer_calls = timeline_.moe_layer_calls;
    }
    return logits;
  }

  // Decode steps of one batch size and context bucket replay one captured graph: every address the
  // graph uses is fixed (metadata region, state, arena scratch allocated in the same order). The
  // first step of a shape runs eagerly (cuBLASLt plans, lazy module loads), the second captures.
  DeviceTensor replay_decode(const StepMeta& meta) {
    int bucket = kMlaDecodeTile;
    while (bucket < meta.max_kv) bucket *= 2;
    const std::pair<int, int> key{meta.n, bucket};
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      if (!warmed_.insert(key).second) {
        StepMeta bound = meta;
        bound.max_kv = std::min<int>(bucket, static_cast<int>(options_.max_context));
        DeviceTensor logits;
        auto graph = std::make_unique<Graph>(stream_.get(), [&](cudaStream_t) { logits = forward(bound, meta.rows); });
        it = graphs_.emplace(key, Captured{std::move(graph), logits}).first;
        ++stats_.graph_captures;
      } else {
        ++stats_.eager_steps;
        return forward(meta, meta.rows);
      }
    }
    it->second.graph->launch(stream_);
    ++stats_.graph_replays;
    return it->second.logits;
  }

  struct Captured {
    std::unique_ptr<Graph> graph;
    DeviceTensor logits;
  };

  CudaOptions options_;
  K3Config config_;
  int device_;
  Arena arena_;
  std::unique_ptr<ExpertStream> experts_;  // expert streaming, else null
  Share share_;  // the routed experts when this GPU holds only some
  DeviceWeights weights_;
  Blas blas_;
  Stream stream_;
  int multiprocessors_ = 0;
  bool fast_mla_ = mla_fast_geometry(config_.mla);
  int page_size_ = kMlaDecodeTile;
  int64_t pages_per_slot_ = 0;  // block-table width: max_context / page_size_
  int64_t kv_blocks_ = 0;
  std::vector<LayerState> state_;
  size_t meta_capacity_ = 0;
  int32_t* device_meta_ = nullptr;
  int32_t* host_meta_ = nullptr;
  int32_t* slot_arg_ = nullptr;
  size_t step_mark_ = 0;
  std::vector<int32_t> free_slots_;
  std::map<int64_t, Sequence> sequences_;
  std::map<std::pair<int, int>, Captured> graphs_;
  std::set<std::pair<int, int>> warmed_;
  mutable CudaExecutorStats stats_;
  bool profiling_ = false;  // set_cuda_op_profiling
  OpTimeline timeline_;
};

}  // namespace

std::unique_ptr<Executor> make_cuda_executor(const CudaOptions& options, const K3Config& config, const LoadPlan& plan,
                                             PlanFiles& files, const ParallelRanks& ranks) {
  check_options(options);
  check_geometry(config);
  if (ranks.placement != nullptr || ranks.routing_record != nullptr) {
    throw Error(Where{"", "", "--expert-placement"}, "the CUDA backend's ranks take the contiguous split and record no routing");
  }
  CudaExecutor::Share share;
  Communicator* expert_ranks = ranks.experts;
  const bool expert_parallel = expert_ranks != nullptr && expert_ranks->size() > 1;
  if (!config.moe && (expert_parallel || options.experts_on_cpu > 0)) {
    throw Error(Where{"", "", expert_parallel ? "--expert-parallel" : "--experts-on-cpu"}, "the model has no routed experts");
  }
  if (expert_parallel && options.expert_cache_bytes > 0) {
    throw Error(Where{"", "", "--expert-parallel"}, "divides the experts among GPUs: not with --expert-cache");
  }
  // Attention tensor parallelism: this rank runs the blocks with its share of the heads.
  K3Config local = config;
  HeadShare heads;
  if (ranks.tensor != nullptr && ranks.tensor->size() > 1) {
    const int64_t t = ranks.tensor->size();
    for (const auto& [field, count] : {std::pair{"linear_attn_config.num_heads", config.kda.num_heads},
                                       std::pair{"num_attention_heads", config.mla.num_heads}}) {
      if (count > 0 && count < t) {
        throw Error(Where{config.file, "", "--tensor-parallel"}, std::to_string(t) + " ranks for " + std::to_string(count) + " " +
                                                                   field + ": every CUDA rank needs a head");
      }
    }
    if (options.expert_cache_bytes > 0 || options.experts_on_cpu > 0) {
      throw Error(Where{"", "", "--tensor-parallel"}, "divides the heads among GPUs: not with --expert-cache or --experts-on-cpu");
    }
    local = cpu::tensor_parallel_config(config, t, ranks.tensor->rank());
    heads = HeadShare{ranks.tensor->rank(), t, config.kda.num_heads, config.mla.num_heads};
    share.tensor_ranks = std::make_unique<HeadsAcrossRanks>(*ranks.tensor);
  }
  // The experts this rank computes: its split under expert parallelism, else all; with CPU experts,
  // `experts_on_cpu` of them (the coldest of the split) on this rank's CPU, the rest on its GPU.
  const IndexRange mine = expert_parallel ? split_range(config.moe->num_experts, expert_ranks->size(), expert_ranks->rank())
                          : config.moe      ? IndexRange{0, config.moe->num_experts}
                                            : IndexRange{};
  std::vector<std::vector<bool>> on_cpu;
  if (options.experts_on_cpu > 0) {
    std::vector<bool> moe_layers;
    for (int64_t l = 0; l < config.num_layers; ++l) moe_layers.push_back(config.is_moe(l));
    on_cpu = choose_cpu_experts(moe_layers, config.moe->num_experts, options.experts_on_cpu, options.cpu_expert_histogram,
                                mine.first, mine.end());
  }
  const auto cpu = [&](int64_t l, int64_t e) { return !on_cpu.empty() && on_cpu[static_cast<size_t>(l)][static_cast<size_t>(e)]; };
  if (expert_parallel || options.experts_on_cpu > 0) {
    share.subset = std::make_unique<ExpertSubset>(
        config, [&](int64_t l, int64_t e) { return e >= mine.first && e < mine.end() && !cpu(l, e); },
        expert_parallel ? "--expert-parallel" : "--experts-on-cpu");
  }
  if (expert_parallel) share.expert_ranks = std::make_unique<RoutedSumAcrossRanks>(*expert_ranks);
  if (options.experts_on_cpu > 0) {
    cpu::LinearOptions numerics;  // the GPU's activation contract (CudaOptions::w4a4)
    numerics.activation = options.w4a4 ? cpu::ActivationNumerics::CheckpointContract : cpu::ActivationNumerics::WeightOnly;
    std::vector<CpuHandles::Experts> banks = bind_routed_experts(config, plan, files, numerics, cpu);
    share.cpu_experts = std::make_unique<CpuExperts>(config, std::move(on_cpu), std::move(banks));
  }
  return std::make_unique<CudaExecutor>(
      options, local,
      [&](Arena& arena, ExpertBankSink* sink) {
        const UploadOptions packing{options.packed_int_experts, options.w4a4, options.dense_linears};
        return upload_weights(arena, local, plan, files, packing, sink, heads);
      },
      std::move(share));
}

std::unique_ptr<Executor> make_synthetic_cuda_executor(const CudaOptions& options, const K3Config& config, uint64_t seed,
                                                       const RoutingSkew& routing) {
  check_options(options);
  check_geometry(config);
  CudaExecutor::Share share;
  std::unique_ptr<CpuExpertCopies> copies;
  if (options.experts_on_cpu > 0) {
    if (!config.moe) throw Error(Where{"", "", "--experts-on-cpu"}, "the model has no routed experts");
    // The CPU's experts are copied from the generated banks (bf16, the GPU's values) as they are made.
    std::vector<bool> moe_layers;
    for (int64_t l = 0; l < config.num_layers; ++l) moe_layers.push_back(config.is_moe(l));
    const int64_t E = config.moe->num_experts;
    std::vector<std::vector<bool>> on_cpu = choose_cpu_experts(moe_layers, E, options.experts_on_cpu, options.cpu_expert_histogram, 0, E);
    share.subset = std::make_unique<ExpertSubset>(
        config, [&](int64_t l, int64_t e) { return !on_cpu[static_cast<size_t>(l)][static_cast<size_t>(e)]; }, "--experts-on-cpu");
    share.cpu_experts = std::make_unique<CpuExperts>(config, std::move(on_cpu), std::vector<CpuHandles::Experts>{});
    copies = std::make_unique<CpuExpertCopies>(config, *share.subset, *share.cpu_experts);
  }
  // The executor owns the share; `copies` refers to its objects only while the weights are made.
  return std::make_unique<CudaExecutor>(
      options, config,
      [&](Arena& arena, ExpertBankSink* sink) {
        return synthetic_weights(arena, config, seed, copies ? static_cast<ExpertBankSink*>(copies.get()) : sink, routing);
      },
      std::move(share));
}

CudaExecutorStats cuda_executor_stats(const Executor& executor) {
  const auto* cuda = dynamic_cast<const CudaExecutor*>(&executor);
  return cuda != nullptr ? cuda->stats() : CudaExecutorStats{};
}

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  K3_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

void set_cuda_op_profiling(Executor& executor, bool on) {
  auto* cuda = dynamic_cast<CudaExecutor*>(&executor);
  if (cuda == nullptr) throw Error("per-op profiling: not a CUDA executor");
  cuda->set_op_profiling(on);
}

}  // namespace k3::cuda
