#include "quant/modelslim/modelslim.h"

namespace k3 {

void dequant_modelslim_binding(const Binding& binding, const ParamSpec& spec, PlanFiles& files, float* out) {
  throw Error(Where{"", binding.param, "scheme"}, "ModelSlim dequantization is not implemented yet");
}

}  // namespace k3
