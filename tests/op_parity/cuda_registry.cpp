#include <stdexcept>

#include "cuda_ops.h"
#include "io/ggml_types.h"

namespace k3::op_parity {
namespace {

std::unique_ptr<CudaOps>& registered() {
  static std::unique_ptr<CudaOps> ops;
  return ops;
}

bool float_storage(const std::string& s) { return s == "F32" || s == "F16" || s == "BF16" || s == "f32" || s == "f16" || s == "bf16"; }

}  // namespace

CudaOps* cuda_ops() { return registered().get(); }

void register_cuda_ops(std::unique_ptr<CudaOps> ops) {
  if (registered()) throw std::logic_error("op parity: CUDA ops registered twice");
  registered() = std::move(ops);
}

CudaLinearForm cuda_linear_form(const Binding& b, int64_t n, int64_t k, bool bank) {
  const Scheme& s = b.scheme;
  if (bank) {
    const bool packed = s.kind == SchemeKind::Nvfp4 || s.kind == SchemeKind::Mxfp4 || s.kind == SchemeKind::W4A8 ||
                        (s.kind == SchemeKind::Ggml && !float_storage(s.storage));
    return packed ? CudaLinearForm::kPackedExperts : CudaLinearForm::kBf16;
  }
  const bool fp8_shape = n % 16 == 0 && k % 16 == 0;
  if (fp8_shape && b.layout_only() && s.kind == SchemeKind::Fp8Block && s.block_n == 128 && s.block_k == 128) {
    return CudaLinearForm::kFp8Block;
  }
  if (fp8_shape && b.layout_only() && s.kind == SchemeKind::Fp8Tensor && b.part("input_scale") != nullptr) {
    return CudaLinearForm::kFp8Tensor;
  }
  return CudaLinearForm::kBf16;
}

const char* cuda_linear_form_name(CudaLinearForm f) {
  switch (f) {
    case CudaLinearForm::kBf16: return "bf16 GEMM (dequantised weight)";
    case CudaLinearForm::kFp8Block: return "FP8_PB_WO GEMM";
    case CudaLinearForm::kFp8Tensor: return "FP8 per-tensor GEMM";
    case CudaLinearForm::kPackedExperts: return "packed expert kernel";
  }
  return "?";
}

std::string cuda_linear_unsupported(const Scheme& scheme, int64_t k, bool bank) {
  Binding b;
  b.scheme = scheme;
  if (cuda_linear_form(b, 0, k, bank) == CudaLinearForm::kPackedExperts) {
    return "CUDA keeps this expert bank packed for the routed-expert kernels: covered by the moe op";
  }
  if (k % 8 != 0) return "CUDA GEMMs read 16-byte aligned bf16 rows: K % 8 == 0 (every model width is)";
  return "";
}

std::string cuda_width_unsupported(int64_t cols) {
  return cols % 8 == 0 ? "" : "CUDA vector kernels need cols % 8 == 0 (every model width is)";
}

}  // namespace k3::op_parity
