#include "backend/cuda/executor/expert_stream.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "backend/cuda/core/check.h"
#include "core/error.h"

namespace k3::cuda {
namespace {

constexpr int64_t kMaxSlots = 1024;  // moe_dispatch's expert limit: the slot banks are its E

Error cache_error(const std::string& why) { return Error(Where{"", "", "--expert-cache"}, why); }

const char* role_name(int role) { return role == 0 ? "w13" : "w2"; }

bool same_form(const DeviceExperts& a, const DeviceExperts& b) {
  return a.packed() == b.packed() && (!a.packed() || a.packed_bank->scheme() == b.packed_bank->scheme());
}

}  // namespace

std::vector<BankArray> bank_arrays(const DeviceExperts& b, int64_t experts) {
  if (experts <= 0) throw Error("bank_arrays: no experts");
  if (b.packed()) return b.packed_bank->arrays(experts);
  const DeviceTensor& t = b.bf16;
  if (t.ld != t.cols || t.rows % experts != 0) throw Error("expert streaming: a bf16 bank is not contiguous per expert");
  return {bank_array(t.data, static_cast<uint64_t>(t.rows * t.cols * 2), experts)};
}

DeviceExperts alloc_bank_like(Arena& arena, const DeviceExperts& like, int64_t like_experts, int64_t experts,
                              const char* what) {
  DeviceExperts b;
  if (like.packed()) {
    b.packed_bank = like.packed_bank->alloc_like(arena, like_experts, experts, what);
  } else {
    b.bf16 = arena.alloc_tensor(DType::kBF16, experts * (like.bf16.rows / like_experts), like.bf16.cols, what);
  }
  return b;
}

ExpertStream::ExpertStream(const K3Config& config)
    : config_(config), experts_(config.moe ? config.moe->num_experts : 0),
      top_k_(config.moe ? config.moe->experts_per_token : 0), layers_(static_cast<size_t>(config.num_layers)) {
  if (!config.moe) throw cache_error("the model has no MoE layers to stream");
}

ExpertStream::~ExpertStream() {
  if (copy_ != nullptr) {
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  for (auto& [a, b] : timers_) cudaEventDestroy(a), cudaEventDestroy(b);
  for (void* p : pinned_) cudaFreeHost(p);
  if (host_ids_ != nullptr) cudaFreeHost(host_ids_);
  if (host_tables_ != nullptr) cudaFreeHost(host_tables_);
}

uint64_t ExpertStream::keep(int64_t layer, int role, const DeviceExperts& bank) {
  const std::vector<BankArray> arrays = bank_arrays(bank, experts_);
  std::vector<size_t> sizes;
  for (const BankArray& a : arrays) sizes.push_back(a.per_expert);
  if (per_expert_[role].empty()) {
    first_[role] = bank;
    per_expert_[role] = sizes;
  } else if (!same_form(bank, first_[role]) || sizes != per_expert_[role]) {
    throw cache_error(std::string("layer ") + std::to_string(layer) + "'s " + role_name(role) +
                      " bank differs in form from the first MoE layer's; streaming needs one form per bank");
  }
  uint64_t bytes = 0;
  std::vector<BankArray>& host = layers_.at(static_cast<size_t>(layer)).host[role];
  for (const BankArray& a : arrays) {
    const size_t n = a.per_expert * static_cast<size_t>(experts_);
    void* p = nullptr;
    if (cudaHostAlloc(&p, n, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      throw cache_error("cannot pin " + std::to_string(n) + " bytes of host memory for layer " + std::to_string(layer) +
                        "'s experts (" + std::to_string(stats_.host_bytes) + " pinned so far)");
    }
    pinned_.push_back(p);
    K3_CUDA_CHECK(cudaMemcpy(p, a.base, n, cudaMemcpyDeviceToHost));
    host.push_back({p, a.per_expert});
    bytes += n;
  }
  stats_.host_bytes += bytes;
  return bytes;  // the caller gives the device bank back: first_ keeps only its shape
}

uint64_t ExpertStream::per_expert_bytes() const {
  uint64_t n = 0;
  for (int r = 0; r < 2; ++r) {
    for (size_t s : per_expert_[r]) n += s;
  }
  return n;
}

void ExpertStream::allocate(Arena& arena, uint64_t cache_bytes) {
  if (per_expert_[0].empty() || per_expert_[1].empty()) throw cache_error("the model has no routed-expert banks");
  const uint64_t per = per_expert_bytes();
  int64_t slots = static_cast<int64_t>(cache_bytes / per);
  if (slots < 1) {
    throw cache_error(std::to_string(cache_bytes) + " bytes hold no expert: one expert (w1, w3, w2) takes " +
                      std::to_string(per) + " bytes");
  }
  const int64_t moe_layers = config_.count(FfnKind::kMoe);
  slots = std::min({slots, moe_layers * experts_, kMaxSlots});
  stats_.slots = slots;
  for (int r = 0; r < 2; ++r) {
    slot_banks_[r] = alloc_bank_like(arena, first_[r], experts_, slots, r == 0 ? "expert cache w13" : "expert cache w2");
    slot_arrays_[r] = bank_arrays(slot_banks_[r], slots);
    for (size_t a = 0; a < slot_arrays_[r].size(); ++a) {
      if (slot_arrays_[r][a].per_expert != per_expert_[r][a]) throw Error("expert streaming: slot bank layout differs");
    }
    first_[r] = slot_banks_[r];
  }
  stats_.slot_bytes = per * static_cast<uint64_t>(slots);
  cache_ = std::make_unique<ExpertCache>(slots);
  K3_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
}

cudaEvent_t ExpertStream::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e = nullptr;
    K3_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
  }
  return events_[i];
}

void ExpertStream::fold_timers() {
  for (size_t i = 0; i < timers_used_; ++i) {
    K3_CUDA_CHECK(cudaEventSynchronize(timers_[i].second));
    float ms = 0;
    K3_CUDA_CHECK(cudaEventElapsedTime(&ms, timers_[i].first, timers_[i].second));
    stats_.copy_seconds += static_cast<double>(ms) * 1e-3;
  }
  timers_used_ = 0;
}

void ExpertStream::reserve_host(size_t picks, size_t passes) {
  auto grow = [](int32_t*& p, size_t& capacity, size_t need) {
    if (need <= capacity) return;
    if (p != nullptr) K3_CUDA_CHECK(cudaFreeHost(p));
    p = nullptr;
    K3_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&p), std::max<size_t>(need, 1) * sizeof(int32_t),
                                cudaHostAllocDefault));
    capacity = need;
  };
  grow(host_ids_, ids_capacity_, picks);
  grow(host_tables_, tables_capacity_, picks * passes);
}

std::vector<DeviceTensor> ExpertStream::plan(int64_t layer, const DeviceTensor& ids, Arena& arena, cudaStream_t stream) {
  if (!cache_) throw Error("expert streaming: plan before allocate");
  expect_dtype(ids, DType::kI32, "expert streaming ids");
  if (ids.ld != ids.cols) throw Error("expert streaming: router ids not contiguous");
  const int64_t T = ids.rows, k = ids.cols;
  const size_t R = static_cast<size_t>(T * k);
  reserve_host(R, 0);
  // The one host sync of streaming: the picks decide the copies. Every earlier copy has landed too
  // (the stream waited for them), so the timers and the staging buffers are free.
  if (R > 0) K3_CUDA_CHECK(cudaMemcpyAsync(host_ids_, ids.data, R * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  K3_CUDA_CHECK(cudaStreamSynchronize(stream));
  fold_timers();

  layer_ = layer;
  std::vector<ExpertKey> needed;
  std::unordered_set<ExpertKey> seen;
  for (size_t i = 0; i < R; ++i) {
    const int32_t e = host_ids_[i];
    if (e < 0 || e >= experts_) throw Error("expert streaming: router id " + std::to_string(e) + " out of range");
    const ExpertKey key = layer * experts_ + e;
    if (seen.insert(key).second) needed.push_back(key);
  }
  waves_ = cache_->plan(needed);
  ++stats_.layer_calls;
  if (waves_.size() > 1) ++stats_.multi_wave_calls;

  // Passes: per wave the hits (resident before it), then the loaded experts.
  passes_.clear();
  std::vector<std::unordered_map<ExpertKey, int32_t>> members;
  for (size_t w = 0; w < waves_.size(); ++w) {
    const ExpertWave& wave = waves_[w];
    std::unordered_map<ExpertKey, int32_t> hits, loaded;
    std::unordered_set<ExpertKey> loads;
    for (const ExpertLoad& l : wave.loads) loads.insert(l.key);
    for (size_t i = 0; i < wave.experts.size(); ++i) {
      (loads.count(wave.experts[i]) ? loaded : hits)[wave.experts[i]] = wave.slots[i];
    }
    if (!hits.empty()) {
      passes_.push_back({w, false, false});
      members.push_back(std::move(hits));
    }
    if (!loaded.empty()) {
      passes_.push_back({w, true, false});
      members.push_back(std::move(loaded));
    }
    if (!passes_.empty()) passes_.back().last_of_wave = true;
  }
  reserve_host(R, passes_.size());
  std::vector<DeviceTensor> tables;
  for (size_t p = 0; p < passes_.size(); ++p) {
    int32_t* h = host_tables_ + p * R;
    for (size_t i = 0; i < R; ++i) {
      const auto it = members[p].find(layer * experts_ + host_ids_[i]);
      h[i] = it != members[p].end() ? it->second : -1;
    }
    tables.push_back(arena.alloc_tensor(DType::kI32, T, k, "expert streaming slot ids"));
  }
  if (!passes_.empty()) {
    // One upload: the tables lie back to back in the arena only if allocation kept them so; copy each.
    for (size_t p = 0; p < passes_.size(); ++p) {
      K3_CUDA_CHECK(cudaMemcpyAsync(tables[p].data, host_tables_ + p * R, R * sizeof(int32_t), cudaMemcpyHostToDevice,
                                    stream));
    }
  }
  stats_.waves += static_cast<int64_t>(waves_.size());
  stats_.passes += static_cast<int64_t>(passes_.size());
  if (!waves_.empty()) issue_wave(0);  // the stream is idle: every slot is free to overwrite
  return tables;
}

void ExpertStream::issue_wave(size_t w) {
  const ExpertWave& wave = waves_[w];
  if (wave.loads.empty()) return;
  if (timers_used_ == timers_.size()) {
    cudaEvent_t a = nullptr, b = nullptr;
    K3_CUDA_CHECK(cudaEventCreate(&a));
    K3_CUDA_CHECK(cudaEventCreate(&b));
    timers_.push_back({a, b});
  }
  const auto [start, end] = timers_[timers_used_++];
  K3_CUDA_CHECK(cudaEventRecord(start, copy_));
  for (const ExpertLoad& load : wave.loads) {
    const int64_t layer = load.key / experts_, e = load.key % experts_;
    const Layer& src = layers_.at(static_cast<size_t>(layer));
    for (int r = 0; r < 2; ++r) {
      for (size_t a = 0; a < slot_arrays_[r].size(); ++a) {
        const size_t n = slot_arrays_[r][a].per_expert;
        char* dst = static_cast<char*>(slot_arrays_[r][a].base) + static_cast<size_t>(load.slot) * n;
        const char* from = static_cast<const char*>(src.host[r].at(a).base) + static_cast<size_t>(e) * n;
        K3_CUDA_CHECK(cudaMemcpyAsync(dst, from, n, cudaMemcpyHostToDevice, copy_));
        stats_.bytes_copied += n;
      }
    }
  }
  K3_CUDA_CHECK(cudaEventRecord(end, copy_));
  K3_CUDA_CHECK(cudaEventRecord(event(2 * w), copy_));
}

void ExpertStream::before_pass(size_t i, cudaStream_t stream) {
  const PassInfo& p = passes_.at(i);
  if (p.needs_copies) K3_CUDA_CHECK(cudaStreamWaitEvent(stream, event(2 * p.wave), 0));
}

void ExpertStream::after_pass(size_t i, cudaStream_t stream) {
  const PassInfo& p = passes_.at(i);
  if (!p.last_of_wave || p.wave + 1 >= waves_.size()) return;
  // The next wave's loads overwrite slots this wave read: they wait for its passes.
  K3_CUDA_CHECK(cudaEventRecord(event(2 * p.wave + 1), stream));
  K3_CUDA_CHECK(cudaStreamWaitEvent(copy_, event(2 * p.wave + 1), 0));
  issue_wave(p.wave + 1);
}

const ExpertStreamStats& ExpertStream::stats() {
  if (copy_ != nullptr) {
    K3_CUDA_CHECK(cudaStreamSynchronize(copy_));
    fold_timers();
  }
  if (cache_) {
    stats_.hits = cache_->stats().hits;
    stats_.misses = cache_->stats().misses;
  }
  return stats_;
}

}  // namespace k3::cuda
