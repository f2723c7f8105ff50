// MXFP4 on the GPU (cuda_format.h): routed-expert banks stay packed for the 4-bit grouped GEMM
// (W4Format::kMxfp4: E8M0 scale per 32, out_scale 1; W4A16 only). Dense MXFP4 linears run the same
// kernels as a bank of one expert (bank_linear.h).
#include "backend/cuda/executor/w4_expert_bank.h"

namespace k3::cuda {
namespace {

std::shared_ptr<const DeviceExpertBank> upload(UploadContext& up, const ExpertBankSource& src, int64_t) {
  return upload_w4_experts(up, src, SchemeKind::Mxfp4, {W4Format::kMxfp4, false, nullptr});
}

}  // namespace

const CudaFormat cuda_format_mxfp4{.expert_layout = w4_expert_layout, .upload_experts = upload, .dense_as_bank = true};

}  // namespace k3::cuda
