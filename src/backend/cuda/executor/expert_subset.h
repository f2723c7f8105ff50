// A GPU that holds only some routed experts of each MoE layer: the GPU's share under hybrid CPU/GPU
// experts (cpu_experts.h) and an expert-parallel rank's share (its experts of the split). The other
// experts' picks are left to someone else (the CPU, the other ranks).
//
// Load: build_weights hands each bank to keep() right after the filler made it on the device; keep()
// copies the kept experts' bytes to host memory and the caller gives the whole bank back (load needs
// one layer's whole bank of device room). allocate() then makes each layer's compact banks (the kept
// experts in ascending order, the bank's own form: bf16 or the format's packed bank) and the device
// map expert → bank index (−1 for an expert not kept).
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/executor/device_weights.h"
#include "model/config.h"

namespace k3::cuda {

class ExpertSubset final : public ExpertBankSink {
 public:
  // kept(layer, expert): whether this GPU holds the expert; every MoE layer must keep at least one
  // (else k3::Error naming `flag`, the option that chose them).
  ExpertSubset(const K3Config& config, const std::function<bool(int64_t layer, int64_t expert)>& kept, const char* flag);

  uint64_t keep(int64_t layer, int role, const DeviceExperts& bank) override;
  // After the weights: every MoE layer's compact banks (set in `weights`) and expert map, from `arena`.
  void allocate(Arena& arena, DeviceWeights& weights);

  bool kept(int64_t layer, int64_t expert) const { return kept_[static_cast<size_t>(layer)][static_cast<size_t>(expert)]; }
  int64_t count(int64_t layer) const { return counts_[static_cast<size_t>(layer)]; }  // experts in the layer's banks
  uint64_t device_bytes() const { return device_bytes_; }  // of every compact bank

  // The router's picks (i32 [T, k]) renamed to the layer's bank indices, −1 for an expert not kept
  // (i32 [T, k] from the arena, on `stream`).
  DeviceTensor picks(int64_t layer, const DeviceTensor& ids, Arena& arena, cudaStream_t stream) const;

 private:
  struct Layer {
    std::vector<std::vector<uint8_t>> bytes[2];  // keep() → allocate(): per bank array
    DeviceExperts form[2];                       // the bank as made (its form and shape; memory given back)
    const int32_t* map = nullptr;                // device [E]
  };

  const K3Config& config_;
  int64_t experts_ = 0;
  std::vector<std::vector<bool>> kept_;  // [layer][expert]; empty for non-MoE layers
  std::vector<int64_t> counts_;
  std::vector<Layer> layers_;
  uint64_t device_bytes_ = 0;
};

}  // namespace k3::cuda
