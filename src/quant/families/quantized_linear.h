// Binding the Linear parameters that a quantization config may store quantized (compressed-tensors
// MXFP4 / FP8-block, DeepSeek-style FP8 block). One rule for all of them:
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

namespace k3 {

// How one quantized module is stored: `<module>.<weight_suffix>` with scheme.storage as dtype,
// `<module>.<scale_suffix>` with one of scale_dtypes.
struct QuantizedLayout {
  Scheme scheme;
  std::string weight_suffix;              // "weight_packed" (MXFP4) or "weight" (FP8)
  std::string scale_suffix;               // "weight_scale" or "weight_scale_inv"
  std::vector<std::string> scale_dtypes;  // accepted scale dtypes

  // On-disk shapes for a [n, k] module.
  std::vector<uint64_t> weight_shape(uint64_t n, uint64_t k) const;
  std::vector<uint64_t> scale_shape(uint64_t n, uint64_t k) const;
};

// compressed-tensors mxfp4-pack-quantized: U8 `weight_packed` [N, K/2] + E8M0 `weight_scale`
// [N, K/32], stored as U8 (the K3 release) or F8_E8M0 (newer safetensors name for the same bytes).
QuantizedLayout mxfp4_layout();
// F8_E4M3 `weight` [N, K] + float multiplier `<scale_suffix>` [cdiv(N,bn), cdiv(K,bk)].
QuantizedLayout fp8_block_layout(uint32_t block_n, uint32_t block_k, const std::string& scale_suffix);

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
