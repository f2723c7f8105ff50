// ModelSlim int4/int8 weights (spec §4): exact dequant references. Implemented with the ModelSlim
// family; materialize() dispatches W4A8 / W8A8 bindings here.
#pragma once

#include "quant/plan/materialize.h"

namespace k3 {

void dequant_modelslim_binding(const Binding& binding, const ParamSpec& spec, PlanFiles& files, float* out);

}  // namespace k3
