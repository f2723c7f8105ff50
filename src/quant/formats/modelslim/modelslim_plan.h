// The ModelSlim schemes in the load plan: W4A8 and W8A8, with the parts a binding of each holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/plan/scheme.h"

namespace k3 {

// I8 int4 codes × per-channel scale (× per-group scale when group_size > 0); packed_along_n: the
// "1.0.0" layout, two codes per byte along N.
Scheme w4a8_scheme(uint32_t group_size, bool packed_along_n);
// I8 codes × per-channel scale; static_activation: the static-activation parts are bound too.
Scheme w8a8_scheme(bool static_activation);

// One stored part of a W4A8 / W8A8 weight [n, k]: its role, accepted dtypes and shapes.
struct ModelSlimPartRule {
  std::string role;
  std::vector<std::string> dtypes;            // empty: any float type (BF16, F16, F32)
  std::vector<std::vector<uint64_t>> shapes;  // any of these
  bool required = true;
};
// The parts of a weight [n, k] stored in `scheme` (W4A8 or W8A8), in binding order.
std::vector<ModelSlimPartRule> modelslim_part_rules(const Scheme& scheme, uint64_t n, uint64_t k);

}  // namespace k3
