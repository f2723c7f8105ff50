// The MXFP4 scheme on the CPU: repacked into the E2M1 layout at load; weight-only activations.
#include "backend/cpu/cpu_format.h"
#include "quant/formats/mxfp4/cpu/mxfp4_matrix.h"

namespace k3::cpu {
namespace {

std::unique_ptr<WeightMatrix> mxfp4_from_binding(const Binding& b, int64_t rows, int64_t cols, PlanFiles& files, int64_t expert,
                                                 const LinearOptions& options, CpuIsa isa) {
  return make_mxfp4_matrix(files.bytes(b.source("weight", expert)), files.bytes(b.source("weight_scale", expert)), rows,
                           cols, isa);
}

}  // namespace

const CpuFormat cpu_format_mxfp4{.make_matrix = mxfp4_from_binding, .reads_in_place = false};

}  // namespace k3::cpu
