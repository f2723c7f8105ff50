// Hybrid CPU/GPU experts over synthetic weights (`k3 bench --synthetic … --experts-on-cpu N`): a
// sink in front of the GPU's ExpertSubset that, as build_weights hands over each generated bf16 bank,
// copies the CPU's experts' rows to host memory and binds them to CpuExperts (the CPU's bf16 kernels
// over the very values the GPU generated), then passes the bank on for the GPU's share.
// Host-only header.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/executor/cpu_experts.h"
#include "backend/cuda/executor/device_weights.h"

namespace k3::cuda {

class CpuExpertCopies final : public ExpertBankSink {
 public:
  CpuExpertCopies(const K3Config& config, ExpertBankSink& gpu_share, CpuExperts& cpu);

  // Role 0 (w13: per expert [w1 ; w3]) is held until role 1 (w2) of the same layer arrives; then the
  // layer's CPU experts are bound. Returns what the GPU's share returns.
  uint64_t keep(int64_t layer, int role, const DeviceExperts& bank) override;

 private:
  const K3Config& config_;
  ExpertBankSink& gpu_share_;
  CpuExperts& cpu_;
  int64_t pending_layer_ = -1;
  int64_t pending_w13_cols_ = 0;  // the held w13 bank's width
  std::vector<std::shared_ptr<const std::vector<uint16_t>>> pending_w13_;  // per expert (null: the GPU's)
};

}  // namespace k3::cuda
