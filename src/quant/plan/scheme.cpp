#include "quant/plan/scheme.h"

#include "quant/plan/plan_format.h"

namespace k3 {

const char* scheme_kind_name(SchemeKind kind) { return plan_format(kind).kind_name; }

std::string Scheme::name() const { return plan_format(kind).name(*this); }

}  // namespace k3
