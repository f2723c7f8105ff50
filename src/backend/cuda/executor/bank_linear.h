// Dense linears kept in their format's routed-expert bank form (CudaFormat::dense_as_bank): the
// weight [n, k] is uploaded by the format's upload_experts as a bank of one expert and multiplied by
// that bank's grouped GEMM over a dispatch of every row to the one expert (moe_one_expert_dispatch).
// The linear so runs the format's expert kernels with their tile choice and activation contract:
// GGUF 8-bit block activations at decode and the prefill GEMM over bf16 rows, NVFP4 / MXFP4 over bf16
// rows (W4A4 where the upload takes input scales), ModelSlim W4A8 int8 per row.
// Host-only header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "backend/cuda/executor/cuda_format.h"

namespace k3::cuda {

// The bank layout rows `rows` of plan parameter i (a 2-D linear [n, k]) stay packed in, or nullopt
// (bf16): its scheme's entry sets dense_as_bank (and packed_int where it needs_packed_int), the
// stored bytes are the weight as they are (layout-only transforms) and the format's expert_layout
// takes the parameter as one expert. A head share under attention tensor parallelism (rows from an
// even row, whole 16-row groups) is a bank of the rank's rows: each row's result is the whole
// parameter's, bit for bit.
std::optional<int64_t> dense_bank_layout(const LoadPlan& plan, PlanFiles& files, size_t i, IndexRange rows,
                                         bool packed_int);

// Whether the form `mode` takes the bank form for a dense linear of format f where dense_bank_layout
// allows it: kPacked always, kAuto where the format's entry chose it (dense_bank_by_default).
inline bool banks_dense_linears(const CudaFormat& f, DenseLinears mode) {
  return mode == DenseLinears::kPacked || (mode == DenseLinears::kAuto && f.dense_bank_by_default);
}

// Sets w (n and k set) to the bank form of rows `rows` of parameter i in `layout` (dense_bank_layout's).
void upload_bank_linear(UploadContext& up, size_t i, const std::string& name, IndexRange rows, int64_t layout,
                        DeviceLinear& w);

}  // namespace k3::cuda
