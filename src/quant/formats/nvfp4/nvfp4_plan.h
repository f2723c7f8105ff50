// The NVFP4 scheme in the load plan.
#pragma once

#include "quant/plan/scheme.h"

namespace k3 {

// U8 `weight` (E2M1 pairs) × E4M3 `weight_scale` per 16 × F32 `weight_scale_2` (ModelOpt NVFP4).
Scheme nvfp4_scheme();

}  // namespace k3
