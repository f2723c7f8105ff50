// Binding the Linear parameters that a quantization config may store quantized, each module as a
// QuantizedLayout (quant/plan/plan_format.h) the family's config names (compressed-tensors,
// DeepSeek-style block quantization). One rule for all of them:
//  - the config says, per module, whether it MAY be quantized (a targeted, not ignored Linear)
//    or MUST stay dense (ignored, or targeted by nothing);
//  - the checkpoint's tensor names and dtypes say whether it IS quantized: a quantized main tensor
//    (`weight_packed`, or an F8_E4M3 `weight`) or a scale tensor present means quantized;
//  - a module stored quantized that the config keeps dense, a module with both a packed and a
//    dense weight, a quantized weight without its scale, wrong dtypes and shapes are problems.
// An expert bank takes the rule of its expert 0 (regexes that tell experts apart are not
// expected); it is quantized when any of its experts is, and then every expert must be.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "quant/families/tensor_binder.h"
#include "quant/plan/plan_format.h"

namespace k3 {

// What the quantization config says about one module, named as the checkpoint spells it
// ("language_model.model.layers.3.self_attn.q_proj").
struct ModuleRule {
  QuantizedLayout layout;   // how the module is stored if it is quantized
  std::string keeps_dense;  // non-empty: the config keeps the module unquantized, and why
};
using ModuleRuleFn = std::function<ModuleRule(const std::string& stored_module)>;

// Modules a "Linear"-targeting config can quantize: Linear weights and expert banks. The router
// gate is a custom module holding a weight (not an nn.Linear) and is never quantized.
bool is_linear_module(const ParamSpec& spec);

// Binds one parameter: non-Linear parameters and Linear ones stored dense through bind_dense(),
// quantized ones with parts "weight" and "weight_scale" (one tensor per expert for banks).
Binding bind_linear_or_dense(TensorBinder& binder, const ParamSpec& spec, const ModuleRuleFn& rule);

}  // namespace k3
