// Expert streaming on the GPU (docs/cuda-backend.md "Expert streaming"): the routed-expert banks of
// every MoE layer stay in pinned host memory in their device layout, and one device "slot bank" per
// bank (w13, w2) holds `slots` experts, managed by backend/expert_cache.h's LRU planner across all
// layers (key = layer · E + expert).
//
// At load, build_weights hands each bank to keep() right after the filler made it on the device
// (the uploader's own code, so the bytes are exactly what the all-resident run reads); keep() copies
// it to pinned memory and the caller gives the device memory back. allocate() then sizes the slot
// banks from the flag's bytes.
//
// Per MoE layer call, plan() takes the router's ids on the host (the one host sync of streaming),
// plans waves, issues each wave's misses as host→device copies on a copy stream, and returns the
// passes to run on the compute stream: per wave, the hits first (no wait) and then the misses (after
// an event the copies record), each pass with its own [T, k] table of slot ids (−1: a pick of an
// expert outside the pass, skipped by moe_dispatch and moe_combine). Before a wave's copies overwrite
// slots, the copy stream waits for the previous wave's passes. Every picked expert runs in some pass.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/executor/cuda_format.h"
#include "backend/cuda/executor/device_weights.h"
#include "model/config.h"
#include "backend/expert_cache.h"

namespace k3::cuda {

// The arrays of a bank of `experts` experts (bf16: the matrix; packed: DeviceExpertBank::arrays).
// Throws on a bank whose rows are not contiguous.
std::vector<BankArray> bank_arrays(const DeviceExperts& bank, int64_t experts);
// A bank shaped like `like` (bf16 or the packed bank's form) for `experts` experts, from the arena.
DeviceExperts alloc_bank_like(Arena& arena, const DeviceExperts& like, int64_t like_experts, int64_t experts,
                              const char* what);

// Streaming statistics (CudaExecutorStats copies them).
struct ExpertStreamStats {
  int64_t slots = 0;               // experts the device cache holds (per bank)
  uint64_t slot_bytes = 0;         // device bytes of the slot banks
  uint64_t host_bytes = 0;         // pinned host bytes of every layer's banks
  int64_t hits = 0, misses = 0;    // expert lookups (ExpertCache)
  int64_t waves = 0, layer_calls = 0, passes = 0, multi_wave_calls = 0;
  uint64_t bytes_copied = 0;       // host → device
  double copy_seconds = 0;         // the copy stream's time in copies (CUDA events)
  double hit_rate() const { return hits + misses > 0 ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0.0; }
  double copy_gb_per_s() const { return copy_seconds > 0 ? static_cast<double>(bytes_copied) / copy_seconds / 1e9 : 0.0; }
};

class ExpertStream final : public ExpertBankSink {
 public:
  explicit ExpertStream(const K3Config& config);
  ~ExpertStream() override;
  ExpertStream(const ExpertStream&) = delete;
  ExpertStream& operator=(const ExpertStream&) = delete;

  // Load time (ExpertBankSink): bank `role` (0 = w13, 1 = w2) of MoE layer `layer`, on the device;
  // copied to pinned host memory. Returns the device bytes it held.
  uint64_t keep(int64_t layer, int role, const DeviceExperts& bank) override;

  // After the weights: the slot banks, as many experts as `cache_bytes` holds for w13 + w2 together
  // (at most every expert of the model and at most 1024, moe_dispatch's limit). Throws k3::Error
  // (field '--expert-cache') when it holds none.
  void allocate(Arena& arena, uint64_t cache_bytes);

  int64_t slots() const { return stats_.slots; }
  uint64_t per_expert_bytes() const;  // w13 + w2 of one expert
  const DeviceExperts& slot_bank(int role) const { return slot_banks_[role]; }

  // The passes of MoE layer `layer` for the router's ids (device i32 [T, k], written on `stream`):
  // syncs `stream` to read them, plans the waves, uploads one slot table per pass (device i32 [T, k]:
  // slot or −1, arena memory the caller gives back) on `stream` and issues the first wave's copies.
  // For each pass i in order, the caller brackets the pass's kernels on `stream` with before_pass(i)
  // (waits for the copies the pass needs) and after_pass(i) (after a wave's last pass, lets the next
  // wave's copies start). The first pass writes the layer's output, later ones accumulate.
  std::vector<DeviceTensor> plan(int64_t layer, const DeviceTensor& ids, Arena& arena, cudaStream_t stream);
  void before_pass(size_t i, cudaStream_t stream);
  void after_pass(size_t i, cudaStream_t stream);

  // Folds finished copy timings in; call when the copy stream is idle (after a step's sync).
  const ExpertStreamStats& stats();

 private:
  struct Layer {
    std::vector<BankArray> host[2];  // pinned images, every expert
  };
  void issue_wave(size_t wave);
  cudaEvent_t event(size_t i);
  void fold_timers();
  void reserve_host(size_t picks, size_t passes);

  const K3Config& config_;
  int64_t experts_ = 0, top_k_ = 0;
  std::vector<Layer> layers_;        // by model layer (empty for dense layers)
  DeviceExperts first_[2];           // the first layer's banks (shape of the slot banks)
  std::vector<size_t> per_expert_[2];
  DeviceExperts slot_banks_[2];
  std::vector<BankArray> slot_arrays_[2];
  std::unique_ptr<ExpertCache> cache_;
  std::vector<void*> pinned_;
  cudaStream_t copy_ = nullptr;
  int32_t* host_ids_ = nullptr;      // pinned [T·k] staging
  int32_t* host_tables_ = nullptr;   // pinned slot tables
  size_t ids_capacity_ = 0, tables_capacity_ = 0;  // int32s
  // The current layer call.
  int64_t layer_ = 0;
  std::vector<ExpertWave> waves_;
  struct PassInfo {
    size_t wave = 0;
    bool needs_copies = false, last_of_wave = false;
  };
  std::vector<PassInfo> passes_;
  std::vector<cudaEvent_t> events_;  // sync events: [2·wave] copies done, [2·wave + 1] wave's passes done
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timers_;  // copy timings since the last fold
  size_t timers_used_ = 0;
  ExpertStreamStats stats_;
};

}  // namespace k3::cuda
