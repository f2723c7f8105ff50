// The FP8 schemes on the CPU (per tensor and per block tile): E4M3 codes read in place.
#include "backend/cpu/cpu_format.h"
#include "quant/formats/fp8/cpu/fp8_matrix.h"
#include "quant/plan/materialize.h"

namespace k3::cpu {
namespace {

std::unique_ptr<WeightMatrix> fp8_from_binding(const Binding& b, int64_t rows, int64_t cols, PlanFiles& files, int64_t expert,
                                               const LinearOptions& options, CpuIsa isa) {
  const SourceTensor& w = b.source("weight", expert);
  const bool block = b.scheme.kind == SchemeKind::Fp8Block;
  // The checkpoint's activation contract: dynamic 1×128 for block FP8, the static input_scale for
  // per-tensor FP8 (float activations where a per-tensor checkpoint has none).
  Fp8Options fp8;
  if (options.activation == ActivationNumerics::CheckpointContract) {
    fp8.a8 = block || b.part("input_scale") != nullptr;
    if (!block && fp8.a8) fp8.input_scale = scalar_source(b, "input_scale", expert, files);
  }
  return make_fp8_matrix(files.bytes(w), decode_source(b.source("weight_scale", expert), files),
                         block ? b.scheme.block_n : rows, block ? b.scheme.block_k : cols, rows, cols, files.file(w),
                         isa, fp8);
}

}  // namespace

const CpuFormat cpu_format_fp8_tensor{.make_matrix = fp8_from_binding, .reads_in_place = true};
const CpuFormat cpu_format_fp8_block{.make_matrix = fp8_from_binding, .reads_in_place = true};

}  // namespace k3::cpu
