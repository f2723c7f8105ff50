// A scheme's CPU binding: how the CPU backend turns a bound weight of that scheme into a fast
// WeightMatrix. Each scheme's folder defines its entry, `cpu_format_<name>`, in its cpu/ subfolder
// (quant/formats/<folder>/cpu/); cpu_formats.cpp builds the table from K3_SCHEME_LIST, so the
// backend's generic code names no format.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/kernels/weight_matrix.h"
#include "quant/formats/scheme_list.h"

namespace k3::cpu {

struct CpuFormat {
  // The fast form of expert `expert` of a layout-only binding (or of its only tensor: expert < 0) as
  // a WeightMatrix [rows, cols], or nullptr where this binding has only the dequantised float32
  // fallback.
  using MakeMatrix = std::unique_ptr<WeightMatrix> (*)(const Binding& b, int64_t rows, int64_t cols, PlanFiles& files,
                                                        int64_t expert, const LinearOptions& options, CpuIsa isa);
  MakeMatrix make_matrix = nullptr;  // null: the scheme has no fast form
  bool reads_in_place = false;       // the fast form reads the checkpoint bytes in place (a KeepAlive)
};

// The binding of `kind`.
const CpuFormat& cpu_format(SchemeKind kind);

#define K3_CPU_FORMAT_DECLARE(Kind, name) extern const CpuFormat cpu_format_##name;
K3_SCHEME_LIST(K3_CPU_FORMAT_DECLARE)
#undef K3_CPU_FORMAT_DECLARE

}  // namespace k3::cpu
