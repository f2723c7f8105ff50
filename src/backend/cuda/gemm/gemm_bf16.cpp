// BF16 GEMM through cuBLASLt (fp32 accumulation, bf16 output).
#include "backend/cuda/gemm/gemm.h"

namespace k3::cuda {

void Blas::bf16(const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& y, cudaStream_t stream) {
  expect_dtype(x, DType::kBF16, "bf16 GEMM input");
  expect_dtype(w, DType::kBF16, "bf16 GEMM weight");
  run(Kind::kBf16, x, w, y, nullptr, nullptr, stream);
}

}  // namespace k3::cuda
