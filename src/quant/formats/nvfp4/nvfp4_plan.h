// The NVFP4 scheme in the load plan.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/plan/plan_format.h"

namespace k3 {

// U8 `weight` (E2M1 pairs) × E4M3 `weight_scale` per 16 × F32 `weight_scale_2` (ModelOpt NVFP4).
Scheme nvfp4_scheme();
// Its parts for a weight [n, k]: `weight` U8 [n, k/2], `weight_scale` F8_E4M3 [n, k/16],
// `weight_scale_2` F32 [] and the activation's `input_scale` F32 [].
std::vector<PartLayout> nvfp4_parts(uint64_t n, uint64_t k);

}  // namespace k3
