// The ModelSlim schemes (W4A8, W8A8) on the CPU: repacked into the int8 layout at load.
#include "backend/cpu/cpu_format.h"
#include "quant/formats/modelslim/cpu/modelslim_matrix.h"

namespace k3::cpu {
namespace {

std::unique_ptr<WeightMatrix> modelslim_from_binding(const Binding& b, int64_t rows, int64_t cols, PlanFiles& files, int64_t expert,
                                                     const LinearOptions& options, CpuIsa isa) {
  return make_modelslim_matrix(b, rows, cols, files, expert, isa);
}

}  // namespace

const CpuFormat cpu_format_w4a8{.make_matrix = modelslim_from_binding, .reads_in_place = false};
const CpuFormat cpu_format_w8a8{.make_matrix = modelslim_from_binding, .reads_in_place = false};

}  // namespace k3::cpu
