// The MXFP4 scheme in the load plan.
#pragma once

#include "quant/plan/plan_format.h"

namespace k3 {

// compressed-tensors mxfp4-pack-quantized: U8 `weight_packed` [N, K/2] + E8M0 `weight_scale`
// [N, K/32], stored as U8 (the K3 release) or F8_E8M0 (newer safetensors name for the same bytes).
QuantizedLayout mxfp4_layout();

}  // namespace k3
