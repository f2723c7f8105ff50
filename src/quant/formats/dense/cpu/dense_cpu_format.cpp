// The dense scheme on the CPU: BF16 / F16 weights read in place; F32 takes the float32 fallback.
#include "backend/cpu/cpu_format.h"
#include "backend/cpu/kernels/float_matrix.h"

namespace k3::cpu {
namespace {

std::unique_ptr<WeightMatrix> dense_from_binding(const Binding& b, int64_t rows, int64_t cols, PlanFiles& files, int64_t expert,
                                                 const LinearOptions& options, CpuIsa isa) {
  const SourceTensor& w = b.source("weight", expert);
  if (w.dtype != "BF16" && w.dtype != "F16") return nullptr;
  return make_half_matrix(files.bytes(w), w.dtype == "BF16", rows, cols, files.file(w), isa);
}

}  // namespace

const CpuFormat cpu_format_dense{.make_matrix = dense_from_binding, .reads_in_place = true};

}  // namespace k3::cpu
