#include "quant/plan/footprint.h"

namespace k3 {

uint64_t Footprint::total_bytes() const {
  uint64_t total = 0;
  for (const ParamFootprint& p : params) total += p.bytes;
  return total;
}

Footprint footprint_of(const LoadPlan& plan) {
  Footprint out;
  out.family = plan.family;
  for (size_t i = 0; i < plan.bindings.size(); ++i) {
    out.params.push_back({plan.params[i], plan.bindings[i].stored_bytes(), plan.bindings[i].scheme.name()});
  }
  return out;
}

}  // namespace k3
