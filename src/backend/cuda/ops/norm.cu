// RMSNorm, one CTA of at most 256 threads per row. The row is read once into registers, kept packed
// as loaded (kIters 8-wide vectors per thread: n <= 8192 with kIters 4, n <= 32768 with 16), reduced,
// then normalised and written: one read and one write of the matrix.
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/ops/ops.h"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;
constexpr int kMaxThreads = 256;

template <typename Tin, typename Tout, int kIters>
__global__ void __launch_bounds__(kMaxThreads) rms_norm_kernel(const Tin* __restrict__ x, int64_t ldx,
                                                               const float* __restrict__ w, float eps,
                                                               Tout* __restrict__ y, int64_t ldy, int n) {
  __shared__ float scratch[32];
  const Tin* xr = x + static_cast<int64_t>(blockIdx.x) * ldx;
  Tout* yr = y + static_cast<int64_t>(blockIdx.x) * ldy;
  detail::Packed8<Tin> raw[kIters];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = (it * blockDim.x + threadIdx.x) * kVec;
    if (i < n) raw[it].load(xr + i);
  }
  float ss = 0.0f;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = (it * blockDim.x + threadIdx.x) * kVec;
    if (i < n) {
      float v[kVec];
      raw[it].unpack(v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) ss += v[k] * v[k];
    }
  }
  ss = detail::block_sum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);  // IEEE div and sqrt
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = (it * blockDim.x + threadIdx.x) * kVec;
    if (i < n) {
      float v[kVec], wv[kVec], out[kVec];
      raw[it].unpack(v);
      detail::load8(w + i, wv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) out[k] = v[k] * r * wv[k];
      detail::store8(yr + i, out);
    }
  }
}

template <typename Tin, typename Tout, int kIters>
void launch_iters(const DeviceTensor& x, const float* w, float eps, const DeviceTensor& y, cudaStream_t stream) {
  const int n = static_cast<int>(x.cols);
  const int vectors = (n + kVec - 1) / kVec;
  const int threads = ((vectors + kIters - 1) / kIters + 31) / 32 * 32;
  rms_norm_kernel<Tin, Tout, kIters><<<static_cast<unsigned>(x.rows), threads, 0, stream>>>(
      x.as<const Tin>(), x.ld, w, eps, y.as<Tout>(), y.ld, n);
  K3_CUDA_CHECK_LAUNCH("rms_norm_kernel");
}

template <typename Tin, typename Tout>
void launch(const DeviceTensor& x, const float* w, float eps, const DeviceTensor& y, cudaStream_t stream) {
  if (x.cols <= 4 * kVec * kMaxThreads) {
    launch_iters<Tin, Tout, 4>(x, w, eps, y, stream);
  } else {
    launch_iters<Tin, Tout, 16>(x, w, eps, y, stream);
  }
}

}  // namespace
void rms_norm(const DeviceTensor& x, const float* w, float eps, const DeviceTensor& y, cudaStream_t stream) {
  expect_shape(y, x.rows, x.cols, "rms_norm output");
  if (x.cols > 32768) throw Error("rms_norm: rows wider than 32768 are not supported, got " + x.describe());
  if (!vec8_ok(x) || !vec8_ok(y) || reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    throw Error("rms_norm: needs cols % 8 == 0 and 16-byte aligned rows and weight, got " + x.describe() + " -> " +
                y.describe());
  }
  if (x.rows == 0 || x.cols == 0) return;
  const bool xf = x.dtype == DType::kF32, yf = y.dtype == DType::kF32;
  if ((!xf && x.dtype != DType::kBF16) || (!yf && y.dtype != DType::kBF16)) {
    throw Error("rms_norm: f32 or bf16 only, got " + x.describe() + " -> " + y.describe());
  }
  if (xf && yf) launch<float, float>(x, w, eps, y, stream);
  if (xf && !yf) launch<float, bf16>(x, w, eps, y, stream);
  if (!xf && yf) launch<bf16, float>(x, w, eps, y, stream);
  if (!xf && !yf) launch<bf16, bf16>(x, w, eps, y, stream);
}

}  // namespace k3::cuda
