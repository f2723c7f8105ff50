#include "quant/families/quantized_linear.h"

#include <algorithm>

namespace k3 {
namespace {

constexpr size_t kWeightSuffixLen = 7;  // ".weight"

// Logical module names of a parameter: "…self_attn.q_proj", or one per expert "…experts.{e}.w1".
std::vector<std::string> modules_of(const ParamSpec& spec) {
  if (spec.kind != ParamKind::ExpertBank) return {spec.name.substr(0, spec.name.size() - kWeightSuffixLen)};
  std::vector<std::string> out;
  for (uint64_t e = 0; e < spec.shape[0]; ++e) {
    const std::string weight = expert_tensor_name(spec.name, static_cast<int64_t>(e), "weight");
    out.push_back(weight.substr(0, weight.size() - kWeightSuffixLen));
  }
  return out;
}

// The checkpoint's spelling of a logical module, from whichever of its tensors exists.
std::string stored_module(const TensorBinder& binder, const std::string& logical) {
  for (const char* suffix : {"weight", "weight_packed", "weight_scale", "weight_scale_inv"}) {
    if (const TensorInfo* t = binder.find(logical + "." + suffix)) {
      return t->name.substr(0, t->name.size() - std::char_traits<char>::length(suffix) - 1);
    }
  }
  return logical;
}

// A packed main tensor, a scale, or a main `weight` of the quantized dtype.
bool stored_quantized(const TensorBinder& binder, const std::string& module, const QuantizedLayout& layout) {
  if (layout.weight_suffix != "weight" && binder.find(module + "." + layout.weight_suffix)) return true;
  if (binder.find(module + "." + layout.scale_suffix)) return true;
  const TensorInfo* weight = binder.find(module + ".weight");
  return layout.weight_suffix == "weight" && weight != nullptr && dtype_name(weight->dtype) == layout.scheme.storage;
}

std::string module_of_tensor(const SourceTensor& t, const std::string& suffix) {
  return t.name.substr(0, t.name.size() - suffix.size() - 1);
}

std::string one_of(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

// Checks one stored part of a quantized module; records dtype/shape problems.
void check_part(TensorBinder& binder, const SourceTensor& t, const std::string& role, const Scheme& scheme,
                const std::vector<std::string>& dtypes, const std::vector<uint64_t>& shape, const std::string& param) {
  const std::string what = " the " + scheme.name() + " " + role + " of parameter '" + param + "'";
  if (std::find(dtypes.begin(), dtypes.end(), t.dtype) == dtypes.end()) {
    binder.problem(t, "dtype", "dtype " + t.dtype + " does not match" + what + " (expected " + one_of(dtypes) + ")");
  }
  if (t.shape != shape) {
    binder.problem(t, "shape", "shape " + shape_string(t.shape) + " does not match" + what + " (expected " + shape_string(shape) + ")");
  }
}

}  // namespace

bool is_linear_module(const ParamSpec& spec) {
  return spec.kind == ParamKind::ExpertBank || (spec.kind == ParamKind::Linear && spec.group != ParamGroup::Router);
}

Binding bind_linear_or_dense(TensorBinder& binder, const ParamSpec& spec, const ModuleRuleFn& rule_of) {
  if (!is_linear_module(spec)) return bind_dense(binder, spec);
  const std::vector<std::string> modules = modules_of(spec);
  const ModuleRule rule = rule_of(stored_module(binder, modules.front()));
  const QuantizedLayout& layout = rule.layout;
  bool quantized = false;
  for (const auto& m : modules) quantized = quantized || stored_quantized(binder, m, layout);
  if (!quantized) return bind_dense(binder, spec);

  Binding b{spec.name, layout.scheme, {{"weight", {}}, {"weight_scale", {}}}, {}};
  const uint64_t n = spec.shape[spec.shape.size() - 2], k = spec.shape.back();
  for (const std::string& problem : shape_problems(layout.scheme, n, k)) binder.problem_for_param(spec.name, problem);
  bool conflict_reported = false;
  for (const auto& m : modules) {
    const auto weight = binder.take(m + "." + layout.weight_suffix, spec.name);
    const auto scale = binder.take(m + "." + layout.scale_suffix, spec.name);
    if (layout.weight_suffix != "weight") {
      if (auto dense = binder.take_if_present(m + ".weight")) {
        binder.problem(*dense, "", "module '" + module_of_tensor(*dense, "weight") + "' has both a quantized '" +
                                       layout.weight_suffix + "' and an unquantized 'weight' tensor");
      }
    }
    if (!rule.keeps_dense.empty() && !conflict_reported && (weight || scale)) {
      const SourceTensor& t = weight ? *weight : *scale;
      const std::string& suffix = weight ? layout.weight_suffix : layout.scale_suffix;
      binder.problem(t, "", "module '" + module_of_tensor(t, suffix) +
                                "' is stored quantized, but the quantization config keeps it unquantized (" + rule.keeps_dense + ")");
      conflict_reported = true;
    }
    if (weight) {
      check_part(binder, *weight, layout.weight_suffix, layout.scheme, {layout.scheme.storage}, layout.weight_shape(n, k), spec.name);
      b.parts[0].tensors.push_back(*weight);
    }
    if (scale) {
      check_part(binder, *scale, layout.scale_suffix, layout.scheme, layout.scale_dtypes, layout.scale_shape(n, k), spec.name);
      b.parts[1].tensors.push_back(*scale);
    }
  }
  return b;
}

}  // namespace k3
