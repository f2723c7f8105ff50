// The ModelSlim schemes in the load plan: W4A8 and W8A8, with the parts a binding of each holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/plan/plan_format.h"

namespace k3 {

// I8 int4 codes × per-channel scale (× per-group scale when group_size > 0); packed_along_n: the
// "1.0.0" layout, two codes per byte along N.
Scheme w4a8_scheme(uint32_t group_size, bool packed_along_n);
// I8 codes × per-channel scale; static_activation: the static-activation parts are bound too.
Scheme w8a8_scheme(bool static_activation);

// The parts of a weight [n, k] stored in `scheme` (W4A8 or W8A8), in binding order.
std::vector<PartLayout> modelslim_parts(const Scheme& scheme, uint64_t n, uint64_t k);

}  // namespace k3
