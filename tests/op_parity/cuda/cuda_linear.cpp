// The linear op on the CUDA target: the weight uploaded in the form the CUDA backend gives its scheme
// (cuda_linear_form, as backend/cuda/executor/device_weights.cpp does), multiplied with bf16
// activations by the GEMM the model runs for it (StepContext::linear's dispatch): the small-M bf16
// kernel up to kGemvModelRows rows and cuBLASLt above, FP8_PB_WO, or the static-scale FP8 GEMM.
#include "backend/cuda/gemm/gemm.h"
#include "cuda_target.h"
#include "quant/plan/materialize.h"

namespace k3::op_parity {

using cuda::DType;

std::vector<float> CudaTarget::linear(const LoadPlan& plan, PlanFiles& files, size_t index, int64_t expert,
                                      const std::vector<float>& x, int64_t m, std::string* kernel) {
  DeviceScope scope;
  CudaDevice& d = scope.device();
  const Binding& b = plan.bindings.at(index);
  const ParamSpec& p = plan.params.at(index);
  const int64_t n = static_cast<int64_t>(p.shape[p.shape.size() - 2]), k = static_cast<int64_t>(p.shape.back());
  const CudaLinearForm form = cuda_linear_form(b, n, k, expert >= 0);
  if (form == CudaLinearForm::kPackedExperts) throw std::logic_error("linear: packed expert banks run in the moe op");
  if (k % 8 != 0) throw std::logic_error("linear: K % 8 != 0 on CUDA");  // the case's cuda_skip says so
  const cuda::DeviceTensor xd = upload(x, m, k, DType::kBF16, "linear x");
  std::string name;
  cuda::DeviceTensor y;
  switch (form) {
    case CudaLinearForm::kFp8Block: {
      const std::vector<float> scales = decode_source(b.source("weight_scale"), files);
      const cuda::Fp8BlockWeight w =
          cuda::upload_fp8_block_weight(d.arena, files.bytes(b.source("weight")).data(), scales.data(), n, k, "fp8 block W");
      y = d.arena.alloc_tensor(DType::kBF16, m, n, "linear y");
      cuda::linear_fp8_pb_wo(d.blas, d.arena, xd, w, y, d.stream);
      name = "linear_fp8_pb_wo";
      break;
    }
    case CudaLinearForm::kFp8Tensor: {
      const cuda::Fp8TensorWeight w =
          cuda::upload_fp8_tensor_weight(d.arena, files.bytes(b.source("weight")).data(),
                                         scalar_source(b, "weight_scale", -1, files), n, k, "fp8 tensor W");
      const float* input_scale = upload_vector({scalar_source(b, "input_scale", -1, files)}, "fp8 input scale");
      y = d.arena.alloc_tensor(DType::kBF16, m, n, "linear y");
      cuda::linear_fp8_tensor(d.blas, d.arena, xd, input_scale, w, y, d.stream);
      name = "linear_fp8_tensor";
      break;
    }
    case CudaLinearForm::kBf16:
    case CudaLinearForm::kPackedExperts: {
      const std::vector<float> weight = expert < 0 ? materialize(b, p, files) : materialize_expert(b, p, files, expert);
      const cuda::DeviceTensor w = upload(weight, n, k, DType::kBF16, "bf16 W");
      y = d.arena.alloc_tensor(DType::kF32, m, n, "linear y");
      if (m <= cuda::kGemvModelRows && cuda::vec8_ok(xd) && cuda::vec8_ok(w)) {
        cuda::gemv_bf16(xd, w, y, d.stream);
        name = "gemv_bf16";
      } else {
        d.blas.bf16(xd, w, y, d.stream);
        name = "cublaslt_bf16";
      }
      break;
    }
  }
  if (kernel != nullptr) *kernel = name;
  return download(y);
}

}  // namespace k3::op_parity
