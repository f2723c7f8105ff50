// Exact dequantization of a bound parameter to float32 through each scheme's reference: what
// `k3 inspect --param` writes and what fast kernels are tested against. Reads only the bytes the
// binding names (mapped lazily, file by file).
#pragma once

#include <vector>

#include "model/parameters.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/plan_files.h"

namespace k3 {

// The parameter as float32, row-major in spec.shape, after the binding's transforms.
std::vector<float> materialize(const Binding& binding, const ParamSpec& spec, PlanFiles& files);

// Expert `expert` of an ExpertBank parameter [E, N, K] as float32 [N, K]: only that expert's source
// bytes are read and dequantised.
std::vector<float> materialize_expert(const Binding& binding, const ParamSpec& spec, PlanFiles& files, int64_t expert);

// A scalar source (input_scale, weight_scale_2, …) of `role` for `expert` (−1: not a bank) as float.
float scalar_source(const Binding& binding, const char* role, int64_t expert, PlanFiles& files);

}  // namespace k3
