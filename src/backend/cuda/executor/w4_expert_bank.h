// The 4-bit E2M1 routed-expert bank (moe_w4.h, W4Format: the block-scale encoding) that two formats'
// entries share: their cuda/ folders make it with upload_w4_experts, passing what differs between
// them (the encoding, a per-tensor weight scale, an activation-quantising input).
// Host-only header.
#pragma once

#include <memory>

#include "backend/cuda/executor/cuda_format.h"
#include "backend/cuda/moe/moe_w4.h"

namespace k3::cuda {

// Quantises the GEMM input under the checkpoint's activation contract into `out` (bf16 [R, K], step
// scratch) with each expert's static input_scale [E]: from the rows, or applying the activation.
using W4InputQuantizer = void (*)(const ExpertInput& in, const float* input_scale, const MoeDispatch& d,
                                  const DeviceTensor& out, cudaStream_t stream);

// The layout check of CudaFormat::expert_layout for these banks: N a multiple of 16 and K of 64 (the
// kernels' row groups and chunks); one layout (0).
std::optional<int64_t> w4_expert_layout(const Binding& b, int64_t experts, int64_t n, int64_t k, PlanFiles& files);

struct W4Upload {
  W4Format format{};
  bool tensor_scale = false;              // each part's `weight_scale_2` joins out_scale (else 1)
  W4InputQuantizer quantize = nullptr;    // the activation contract, used when UploadContext::w4a4
};

// Banks src packed per expert as [first_e ; second_e], the codes and block scales as stored
// (repacked into the kernels' tiles); out_scale per (expert, part) = the part's weight_scale_2 where
// tensor_scale (else 1) — the only per-tensor factor of the W4A16 contract, applied once in the GEMM
// epilogue (moe_w4.h).
//   Under W4A4 (up.w4a4 and a quantizer) also each expert's static input_scale ([E], device): one
// per expert, so w1 and w3 must agree (they scale the same input); it joins out_scale, as the CPU
// folds it into its output scale.
std::shared_ptr<const DeviceExpertBank> upload_w4_experts(UploadContext& up, const ExpertBankSource& src,
                                                          SchemeKind scheme, const W4Upload& how);

}  // namespace k3::cuda
