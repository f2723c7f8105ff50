// The NVFP4 scheme on the CPU: repacked into the E2M1 layout at load; under the checkpoint contract
// the W4A4 activations.
#include "backend/cpu/cpu_format.h"
#include "quant/formats/nvfp4/cpu/nvfp4_matrix.h"
#include "quant/plan/materialize.h"

namespace k3::cpu {
namespace {

std::unique_ptr<WeightMatrix> nvfp4_from_binding(const Binding& b, int64_t rows, int64_t cols, PlanFiles& files, int64_t expert,
                                                 const LinearOptions& options, CpuIsa isa) {
  Nvfp4Options nvfp4;
  if (options.activation == ActivationNumerics::CheckpointContract) {
    nvfp4.w4a4 = true;
    nvfp4.input_scale = scalar_source(b, "input_scale", expert, files);
  }
  const float global = scalar_source(b, "weight_scale_2", expert, files);
  return make_nvfp4_matrix(files.bytes(b.source("weight", expert)), files.bytes(b.source("weight_scale", expert)), global,
                           rows, cols, isa, nvfp4);
}

}  // namespace

const CpuFormat cpu_format_nvfp4{.make_matrix = nvfp4_from_binding, .reads_in_place = false};

}  // namespace k3::cpu
