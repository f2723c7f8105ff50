// Hybrid CPU/GPU experts (docs/cuda-backend.md "Hybrid CPU/GPU experts"): in every MoE layer the
// routed experts chosen for the CPU (parallel/expert_placement.h choose_cpu_experts) are computed by
// the CPU backend's kernels over the checkpoint's own bytes (backend/cpu/weights.h
// bind_routed_experts); the GPU holds only the others (an ExpertSubset, expert_subset.h).
//
// Per MoE layer call (one host wait, so no decode CUDA graphs): begin() queues copies of the router's
// ids and weights and of the layer's input rows to pinned host memory, before the GPU's own pass;
// finish(), called once the GPU has the rest of the layer queued, waits for those copies only,
// computes the CPU experts' picks on the host while the GPU runs, and queues the copy of their
// weighted sum back and its addition to the routed sum. A token's sum is the GPU experts' (in pick
// order) plus the CPU experts' (in ascending expert order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cpu/weights.h"
#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/tensor.h"
#include "model/config.h"

namespace k3::cuda {

// Statistics of the CPU's share (CudaExecutorStats copies them).
struct CpuExpertStats {
  int64_t per_layer = 0;        // experts of each MoE layer on the CPU
  int64_t layer_calls = 0;
  int64_t cpu_picks = 0, gpu_picks = 0;
  double cpu_seconds = 0;       // host time computing the CPU experts
  double wait_seconds = 0;      // host time waiting for the layer's inputs to reach host memory
};

class CpuExperts {
 public:
  // on_cpu[layer][expert]: the CPU's experts (empty for non-MoE layers); cpu_banks: those experts
  // bound for the CPU (null elsewhere), from the same checkpoint, or empty: every expert is bound
  // later with bind() (synthetic weights, made while the GPU's banks are generated).
  CpuExperts(const K3Config& config, std::vector<std::vector<bool>> on_cpu, std::vector<CpuHandles::Experts> cpu_banks);

  // The CPU's linears of expert `expert` of MoE layer `layer`, one of the CPU's.
  void bind(int64_t layer, int64_t expert, CpuHandles::Linear w1, CpuHandles::Linear w3, CpuHandles::Linear w2);
  ~CpuExperts();
  CpuExperts(const CpuExperts&) = delete;
  CpuExperts& operator=(const CpuExperts&) = delete;

  int64_t per_layer() const { return stats_.per_layer; }
  bool on_cpu(int64_t layer, int64_t expert) const { return on_cpu_[static_cast<size_t>(layer)][static_cast<size_t>(expert)]; }

  // MoE layer `layer`'s router ids and weights (i32 / f32 [T, k]) and the experts' input rows `z`
  // (bf16 [T, D]) to the host, on `stream`.
  void begin(int64_t layer, const DeviceTensor& z, const DeviceTensor& ids, const DeviceTensor& weights, cudaStream_t stream);
  // The CPU experts' picks of the begun layer, added into `routed` (f32 [T, D]) on `stream`.
  void finish(const DeviceTensor& routed, Arena& arena, cudaStream_t stream);

  const CpuExpertStats& stats() const { return stats_; }

 private:
  void reserve(int64_t tokens, int64_t width);

  ActivationConfig activation_;
  int64_t experts_ = 0, top_k_ = 0;
  std::vector<std::vector<bool>> on_cpu_;
  std::vector<CpuHandles::Experts> cpu_banks_;
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
