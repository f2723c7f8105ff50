#include "quant/plan/plan_format.h"

#include <array>

namespace k3 {

#define K3_PLAN_FORMAT_DECLARE(kind, name) extern const PlanFormat plan_format_##name;
K3_SCHEME_LIST(K3_PLAN_FORMAT_DECLARE)
#undef K3_PLAN_FORMAT_DECLARE

namespace {

// Indexed by SchemeKind: the enumerators follow K3_SCHEME_LIST's order.
const std::array kPlanFormats = {
#define K3_PLAN_FORMAT_ENTRY(kind, name) &plan_format_##name,
    K3_SCHEME_LIST(K3_PLAN_FORMAT_ENTRY)
#undef K3_PLAN_FORMAT_ENTRY
};

}  // namespace

const PlanFormat& plan_format(SchemeKind kind) {
  const auto i = static_cast<size_t>(kind);
  if (i >= kPlanFormats.size()) throw Error(Where{}, "scheme kind " + std::to_string(i) + " has no plan entry");
  return *kPlanFormats[i];
}

std::vector<std::string> shape_problems(const Scheme& scheme, uint64_t n, uint64_t k) {
  const PlanFormat& f = plan_format(scheme.kind);
  return f.shape_problems == nullptr ? std::vector<std::string>{} : f.shape_problems(scheme, n, k);
}

std::vector<uint64_t> QuantizedLayout::weight_shape(uint64_t n, uint64_t k) const {
  const PlanFormat& f = plan_format(scheme.kind);
  if (f.linear_weight_shape == nullptr) throw Error(Where{}, std::string(f.kind_name) + " has no quantized Linear layout");
  return f.linear_weight_shape(scheme, n, k);
}

std::vector<uint64_t> QuantizedLayout::scale_shape(uint64_t n, uint64_t k) const {
  const PlanFormat& f = plan_format(scheme.kind);
  if (f.linear_scale_shape == nullptr) throw Error(Where{}, std::string(f.kind_name) + " has no quantized Linear layout");
  return f.linear_scale_shape(scheme, n, k);
}

const SourcePart& need_part(const Binding& b, const char* role) {
  const SourcePart* p = b.part(role);
  if (p == nullptr || p->tensors.empty()) throw Error(Where{"", b.param, role}, "binding has no '" + std::string(role) + "' source");
  return *p;
}

MatrixDims matrix_of(const ParamSpec& spec) {
  const auto& s = spec.shape;
  if (s.size() < 2) throw Error(Where{"", spec.name, "shape"}, "quantized parameter must be at least 2-D");
  return {static_cast<int64_t>(s[s.size() - 2]), static_cast<int64_t>(s[s.size() - 1])};
}

}  // namespace k3
