// FP8 block-scaled GEMM (FP8_PB_WO): cuBLASLt with VEC128_32F scales for the activation (1×128
// along K, from quantize_fp8_1x128) and BLK128x128_32F scales for the weight (repacked at upload
// into cuBLASLt's padded layout), TN, bf16 output.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/ops/ops.h"
#include "quant/formats/fp8/cuda/fp8_quant.h"
#include "backend/cuda/core/upload.h"

namespace k3::cuda {

int64_t fp8_block_scale_ld(int64_t k) { return ((k + 127) / 128 + 3) / 4 * 4; }

Fp8BlockWeight upload_fp8_block_weight(Arena& arena, const uint8_t* codes, const float* scales, int64_t n, int64_t k,
                                       const char* what) {
  Fp8BlockWeight w;
  w.codes = upload_bytes(arena, codes, n, k, DType::kE4M3, what);
  const int64_t nb = (n + 127) / 128, kb = (k + 127) / 128;
  w.scale_ld = fp8_block_scale_ld(k);
  std::vector<float> packed(static_cast<size_t>(nb * w.scale_ld), 0.0f);
  for (int64_t i = 0; i < nb; ++i) {
    for (int64_t j = 0; j < kb; ++j) packed[static_cast<size_t>(i * w.scale_ld + j)] = scales[i * kb + j];
  }
  w.scales = arena.alloc_n<float>(packed.size(), what);
  copy_bytes_to_device(w.scales, packed.data(), packed.size() * sizeof(float));
  return w;
}

void Blas::fp8_block(const DeviceTensor& xq, const float* x_scales, const Fp8BlockWeight& w, const DeviceTensor& y,
                     cudaStream_t stream) {
  expect_dtype(xq, DType::kE4M3, "fp8 block GEMM input");
  expect_dtype(w.codes, DType::kE4M3, "fp8 block GEMM weight");
  if (x_scales == nullptr || w.scales == nullptr) throw Error("fp8 block GEMM: missing scales");
  if (w.scale_ld != fp8_block_scale_ld(w.codes.cols)) throw Error("fp8 block GEMM: weight scales not repacked");
  if (xq.rows % kFp8BlockRowAlign != 0) {
    throw Error("fp8 block GEMM: M = " + std::to_string(xq.rows) + " is not a multiple of " +
                std::to_string(kFp8BlockRowAlign) + " (cuBLASLt has no block-scaled kernel for it; pad the rows)");
  }
  run(Kind::kFp8Block, xq, w.codes, y, x_scales, w.scales, stream);
}

void linear_fp8_pb_wo(Blas& blas, Arena& scratch, const DeviceTensor& x, const Fp8BlockWeight& w, const DeviceTensor& y,
                      cudaStream_t stream) {
  const int64_t M = x.rows, Mp = fp8_block_padded_rows(M), N = w.codes.rows;
  if (y.rows != M && y.rows != Mp) expect_shape(y, M, N, "FP8_PB_WO output");
  expect_dtype(y, DType::kBF16, "FP8_PB_WO output");
  if (M == 0) return;
  const size_t mark = scratch.mark();
  const DeviceTensor xq = scratch.alloc_tensor(DType::kE4M3, Mp, x.cols, "fp8 activation codes");
  float* xs = scratch.alloc_n<float>(static_cast<size_t>(fp8_1x128_scale_count(Mp, x.cols)), "fp8 activation scales");
  quantize_fp8_1x128(x, xq, xs, stream);
  if (y.rows == Mp) {
    blas.fp8_block(xq, xs, w, y, stream);
  } else {
    const DeviceTensor yp = scratch.alloc_tensor(DType::kBF16, Mp, N, "FP8_PB_WO padded output");
    blas.fp8_block(xq, xs, w, yp, stream);
    K3_CUDA_CHECK(cudaMemcpy2DAsync(y.data, static_cast<size_t>(y.ld) * 2, yp.data, static_cast<size_t>(N) * 2,
                                    static_cast<size_t>(N) * 2, static_cast<size_t>(M), cudaMemcpyDeviceToDevice, stream));
  }
  scratch.reset(mark);
}

}  // namespace k3::cuda
