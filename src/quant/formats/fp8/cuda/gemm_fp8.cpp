// FP8 per-tensor GEMM (ModelOpt FP8): e4m3 operands, one fp32 dequant multiplier each, applied by
// cuBLASLt (SCALAR_32F scale mode, the default) to the fp32 accumulator.
#include <cuda_runtime.h>

#include "backend/cuda/core/check.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/ops/ops.h"
#include "quant/formats/fp8/cuda/fp8_quant.h"
#include "backend/cuda/core/upload.h"

namespace k3::cuda {

Fp8TensorWeight upload_fp8_tensor_weight(Arena& arena, const uint8_t* codes, float scale, int64_t n, int64_t k,
                                         const char* what) {
  Fp8TensorWeight w;
  w.codes = upload_bytes(arena, codes, n, k, DType::kE4M3, what);
  w.scale = arena.alloc_n<float>(1, what);
  copy_bytes_to_device(w.scale, &scale, sizeof(float));
  return w;
}

void Blas::fp8_tensor(const DeviceTensor& xq, const float* x_scale, const Fp8TensorWeight& w, const DeviceTensor& y,
                      cudaStream_t stream) {
  expect_dtype(xq, DType::kE4M3, "fp8 GEMM input");
  expect_dtype(w.codes, DType::kE4M3, "fp8 GEMM weight");
  if (x_scale == nullptr || w.scale == nullptr) throw Error("fp8 per-tensor GEMM: missing scale");
  run(Kind::kFp8Tensor, xq, w.codes, y, x_scale, w.scale, stream);
}

void linear_fp8_tensor(Blas& blas, Arena& scratch, const DeviceTensor& x, const float* input_scale,
                       const Fp8TensorWeight& w, const DeviceTensor& y, cudaStream_t stream) {
  const size_t mark = scratch.mark();
  const DeviceTensor xq = scratch.alloc_tensor(DType::kE4M3, x.rows, x.cols, "fp8 activation codes");
  quantize_fp8_tensor(x, input_scale, xq, stream);
  blas.fp8_tensor(xq, input_scale, w, y, stream);
  scratch.reset(mark);
}

}  // namespace k3::cuda
