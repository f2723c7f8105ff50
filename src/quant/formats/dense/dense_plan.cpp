#include "quant/formats/dense/dense_plan.h"

#include <algorithm>

#include "quant/plan/plan_format.h"

namespace k3 {

Scheme dense_scheme(const std::string& dtype) { return Scheme{SchemeKind::Dense, dtype}; }

namespace {

// Every weight source decoded elementwise, one after the other.
void dequant_dense(const Binding& b, const ParamSpec&, PlanFiles& files, float* out) {
  uint64_t pos = 0;
  for (const auto& t : need_part(b, "weight").tensors) {
    std::vector<float> v = decode_source(t, files);
    std::copy(v.begin(), v.end(), out + pos);
    pos += v.size();
  }
}

}  // namespace

extern const PlanFormat plan_format_dense{
    "DENSE", [](const Scheme& s) { return s.storage; }, dequant_dense};

}  // namespace k3
