// The GGML schemes on the CPU: block types with a dequantiser read in place (F16 / BF16 through the
// shared half-precision kernels, F32 through the float32 fallback); the split MLA kv_b has no fast
// form.
#include "backend/cpu/cpu_format.h"
#include "backend/cpu/kernels/float_matrix.h"
#include "quant/formats/ggml/cpu/ggml_matrix.h"
#include "quant/formats/ggml/ggml_dequant.h"

namespace k3::cpu {
namespace {

std::unique_ptr<WeightMatrix> ggml_from_binding(const Binding& b, int64_t rows, int64_t cols, PlanFiles& files, int64_t expert,
                                                const LinearOptions& options, CpuIsa isa) {
  const SourceTensor& w = b.source("weight", expert);
  const GgmlTypeInfo* info = find_ggml_type(b.scheme.storage);
  if (info == nullptr || !ggml_has_dequant(info->type)) return nullptr;
  if (info->type == GgmlType::F32) return nullptr;  // copied as float32 by the fallback
  if (info->type == GgmlType::F16 || info->type == GgmlType::BF16) {
    return make_half_matrix(files.bytes(w), info->type == GgmlType::BF16, rows, cols, files.file(w), isa);
  }
  return make_ggml_matrix(info->type, files.bytes(w), rows, cols, files.file(w), isa);
}

}  // namespace

const CpuFormat cpu_format_ggml{.make_matrix = ggml_from_binding, .reads_in_place = true};
const CpuFormat cpu_format_ggml_split_kv_b{.make_matrix = nullptr, .reads_in_place = false};

}  // namespace k3::cpu
