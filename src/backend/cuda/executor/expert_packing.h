// Which form a routed-expert bank takes on the GPU (device_weights.cpp's uploader asks this first):
// kept packed by its scheme's CUDA entry (cuda_format.h), or dequantised to bf16. Host-only and
// independent of a device, so the choice is tested without a GPU (tests/backend/cuda/test_expert_packing.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "backend/cuda/executor/cuda_format.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/materialize.h"

namespace k3::cuda {

struct ExpertPacking {
  const CudaFormat* format = nullptr;  // packed: the entry that uploads the bank; nullptr: bf16
  SchemeKind scheme = SchemeKind::Dense;
  int64_t layout = 0;                  // CudaFormat::expert_layout's
  bool packed() const { return format != nullptr; }
};

// Bank parameter `first` [E, N₁, K] (and `second` [E, N₂, K] stacked after it per expert, the w1 / w3
// pair; nullopt: a single bank): packed when both are stored in one scheme whose entry packs them, as
// one source per expert, in the same layout (CudaFormat::expert_layout) — formats with
// needs_packed_int only when packed_int_experts (CudaOptions); else bf16.
ExpertPacking choose_expert_packing(const LoadPlan& plan, PlanFiles& files, size_t first, std::optional<size_t> second,
                                    bool packed_int_experts);

}  // namespace k3::cuda
