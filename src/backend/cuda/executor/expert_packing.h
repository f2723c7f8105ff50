// Which form a routed-expert bank takes on the GPU (device_weights.cpp's uploader asks this first):
// kept packed for one of the quantized-expert kernels, or dequantised to bf16. Host-only and
// independent of a device, so the choice is tested without a GPU (tests/backend/cuda/test_expert_packing.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "backend/cuda/moe/moe_w4.h"
#include "io/ggml_types.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/materialize.h"

namespace k3::cuda {

struct ExpertPacking {
  enum class Kind : uint8_t { kBf16, kW4, kW4A8, kGgml };
  Kind kind = Kind::kBf16;
  W4Format w4 = W4Format::kNvfp4;  // kW4
  int64_t w4a8_group = 0;          // kW4A8: the weight scale group (0: per channel)
  GgmlType ggml = GgmlType::Q4_K;  // kGgml
};

// Bank parameter `first` [E, N₁, K] (and `second` [E, N₂, K] stacked after it per expert, the w1 / w3
// pair; nullopt: a single bank): packed when both are stored in one format a kernel takes, as one
// source per expert (N a multiple of 16, K of 64 — or of the GGUF block), W4A8 / GGUF only when
// packed_int_experts (CudaOptions); else kBf16. Reads expert 0's ModelSlim weight header for its group.
ExpertPacking choose_expert_packing(const LoadPlan& plan, PlanFiles& files, size_t first, std::optional<size_t> second,
                                    bool packed_int_experts);

}  // namespace k3::cuda
