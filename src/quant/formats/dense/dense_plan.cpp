#include "quant/formats/dense/dense_plan.h"

#include <algorithm>

#include "quant/formats/dense/dense_decode.h"
#include "quant/plan/plan_format.h"
#include "quant/plan/plan_files.h"

namespace k3 {

Scheme dense_scheme(const std::string& dtype) { return Scheme{SchemeKind::Dense, dtype}; }

namespace {

// Every weight source decoded elementwise, one after the other.
void dequant_dense(const Binding& b, const ParamSpec&, PlanFiles& files, float* out) {
  uint64_t pos = 0;
  for (const auto& t : need_part(b, "weight").tensors) {
    const Where where{files.path(t), t.name, "dtype"};
    const uint64_t n = numel(t.shape);
    decode_dense(dtype_from_string(t.dtype, where), files.bytes(t), out + pos, n, where);  // in place: no copy
    pos += n;
  }
}

}  // namespace

extern const PlanFormat plan_format_dense{
    "DENSE", [](const Scheme& s) { return s.storage; }, dequant_dense};

}  // namespace k3
