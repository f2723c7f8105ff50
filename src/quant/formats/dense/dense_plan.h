// The dense scheme in the load plan: unquantized values stored as is (storage names the dtype).
#pragma once

#include <string>

#include "quant/plan/scheme.h"

namespace k3 {

// Dense storage of `dtype` ("BF16", "F32", …; "" while a binder has not read the dtype yet).
Scheme dense_scheme(const std::string& dtype);

}  // namespace k3
