// Hybrid CPU/GPU experts (docs/cuda-backend.md "Hybrid CPU/GPU experts"): in every MoE layer the
// routed experts chosen for the CPU (parallel/expert_placement.h choose_cpu_experts) are computed by
// the CPU backend's kernels over the checkpoint's own bytes (backend/cpu/weights.h
// bind_routed_experts); the GPU's banks hold only the other experts, so the GPU needs memory for
// those alone.
//
// Load: build_weights hands each bank to keep() right after the filler made it on the device; keep()
// copies the GPU experts' bytes to host memory and the caller gives the whole bank back. allocate()
// then makes each layer's compact banks (the GPU experts in ascending order) and the map from expert
// to bank index (−1 for a CPU expert).
//
// Per MoE layer call (one host wait, so no decode CUDA graphs): begin() maps the router's ids to the
// bank's indices on the device and queues copies of the ids, the routing weights and the layer's
// input rows to pinned host memory; the caller launches the GPU pass over the mapped table; finish()
// waits for the copies only, computes the CPU experts' picks on the host while the GPU pass runs,
// and queues the copy of their weighted sum back and its addition to the routed sum. A token's sum
// is the GPU experts' (in pick order) plus the CPU experts' (in ascending expert order).
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cpu/weights.h"
#include "backend/cuda/core/arena.h"
#include "backend/cuda/executor/device_weights.h"
#include "model/config.h"

namespace k3::cuda {

// Statistics of the CPU's share (CudaExecutorStats copies them).
struct CpuExpertStats {
  int64_t per_layer = 0;        // experts of each MoE layer on the CPU
  uint64_t gpu_bank_bytes = 0;  // device bytes of the GPU experts' banks
  int64_t layer_calls = 0;
  int64_t cpu_picks = 0, gpu_picks = 0;
  double cpu_seconds = 0;       // host time computing the CPU experts
  double wait_seconds = 0;      // host time waiting for the layer's inputs to reach host memory
};

class CpuExperts final : public ExpertBankSink {
 public:
  // on_cpu[layer][expert]: the CPU's experts (empty for non-MoE layers); cpu_banks: those experts
  // bound for the CPU (null elsewhere), from the same checkpoint.
  CpuExperts(const K3Config& config, std::vector<std::vector<bool>> on_cpu, std::vector<CpuHandles::Experts> cpu_banks);
  ~CpuExperts() override;
  CpuExperts(const CpuExperts&) = delete;
  CpuExperts& operator=(const CpuExperts&) = delete;

  // Load time (ExpertBankSink): keeps the GPU experts' bytes of bank `role` (0 = w13, 1 = w2).
  uint64_t keep(int64_t layer, int role, const DeviceExperts& bank) override;
  // After the weights: every MoE layer's compact banks and expert map into `arena`, set in `weights`.
  void allocate(Arena& arena, DeviceWeights& weights);

  int64_t gpu_experts() const { return gpu_experts_; }

  // The GPU's pick table for MoE layer `layer` (i32 [T, k] of bank indices, −1 for a CPU pick; arena
  // memory) from the router's ids and weights, and the copies of ids, weights and `z` (the experts'
  // input rows, bf16 [T, D]) to the host, all on `stream`.
  DeviceTensor begin(int64_t layer, const DeviceTensor& z, const DeviceTensor& ids, const DeviceTensor& weights,
                     Arena& arena, cudaStream_t stream);
  // After the GPU pass is queued: the CPU experts' picks of the begun layer, added into `routed`
  // (f32 [T, D]) on `stream`.
  void finish(const DeviceTensor& routed, Arena& arena, cudaStream_t stream);

  const CpuExpertStats& stats() const { return stats_; }

 private:
  struct Layer {
    std::vector<std::vector<uint8_t>> gpu_bytes[2];  // keep() → allocate(): per bank array
    const int32_t* map = nullptr;                     // device [E]: expert → bank index or −1
  };
  void reserve(int64_t tokens, int64_t width);

  const K3Config& config_;
  ActivationConfig activation_;
  int64_t experts_ = 0, top_k_ = 0, gpu_experts_ = 0;
  std::vector<std::vector<bool>> on_cpu_;
  std::vector<CpuHandles::Experts> cpu_banks_;
  std::vector<Layer> layers_;
  DeviceExperts form_[2];  // the first bank of each role (its form, for the compact banks)
  // Pinned host staging of the current call.
  int32_t* ids_ = nullptr;
  float* weights_ = nullptr;
  uint16_t* rows_ = nullptr;
  float* sum_ = nullptr;
  int64_t capacity_tokens_ = 0, capacity_width_ = 0;
  cudaEvent_t inputs_ready_ = nullptr;
  int64_t layer_ = -1, tokens_ = 0, width_ = 0;
  CpuExpertStats stats_;
};

}  // namespace k3::cuda
