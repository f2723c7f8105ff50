// The GGML schemes in the load plan: one GGML block type, and MLA kv_b split into k_b + v_b.
#pragma once

#include "io/ggml_types.h"
#include "quant/plan/scheme.h"

namespace k3 {

// `weight` (every expert of a bank) stored as GGML blocks of `type`.
Scheme ggml_scheme(GgmlType type);
// MLA kv_b [n_h·(d_nope+d_v), r_kv] stored as parts k_b [n_h, r_kv, d_nope] (Q4_0) and
// v_b [n_h, d_v, r_kv] (Q2_K) (quant-formats §5.5).
Scheme ggml_split_kv_b_scheme();

}  // namespace k3
