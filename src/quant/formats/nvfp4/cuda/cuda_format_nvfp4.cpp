// NVFP4 on the GPU (cuda_format.h): routed-expert banks stay packed for the 4-bit grouped GEMM
// (W4Format::kNvfp4: E4M3 scale per 16, each part's weight_scale_2 in out_scale); under W4A4
// (CudaOptions::w4a4) the GEMM input is quantised with each expert's input_scale (moe_nvfp4_act.h).
// Dense NVFP4 linears run the same kernels as a bank of one expert (bank_linear.h).
#include "backend/cuda/executor/w4_expert_bank.h"
#include "quant/formats/nvfp4/cuda/moe_nvfp4_act.h"

namespace k3::cuda {
namespace {

void quantize_input(const ExpertInput& in, const float* input_scale, const MoeDispatch& d, const DeviceTensor& out,
                    cudaStream_t stream) {
  if (in.act != nullptr) {
    moe_quantize_nvfp4_activation(*in.act, in.gate, in.up, input_scale, d, out, stream);
  } else {
    moe_quantize_nvfp4_rows(in.rows, input_scale, d, out, stream);
  }
}

std::shared_ptr<const DeviceExpertBank> upload(UploadContext& up, const ExpertBankSource& src, int64_t) {
  return upload_w4_experts(up, src, SchemeKind::Nvfp4, {W4Format::kNvfp4, true, quantize_input});
}

}  // namespace

const CudaFormat cuda_format_nvfp4{.expert_layout = w4_expert_layout, .upload_experts = upload, .dense_as_bank = true};

}  // namespace k3::cuda
