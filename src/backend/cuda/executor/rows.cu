#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/executor/rows.h"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;
constexpr int kThreads = 128;

template <typename Tin, typename Tout>
__global__ void __launch_bounds__(kThreads) copy_rows_kernel(const Tin* __restrict__ src, int64_t lds,
                                                             const int32_t* __restrict__ src_index, Tout* __restrict__ dst,
                                                             int64_t ldd, const int32_t* __restrict__ dst_index, int cols) {
  const int64_t r = blockIdx.x;
  const Tin* s = src + (src_index ? src_index[r] : r) * lds;
  Tout* d = dst + (dst_index ? dst_index[r] : r) * ldd;
  for (int i = threadIdx.x * kVec; i < cols; i += kThreads * kVec) {
    float v[kVec];
    detail::load8(s + i, v);
    detail::store8(d + i, v);
  }
}

template <typename Tin>
__global__ void __launch_bounds__(kThreads) add_rows_kernel(float* __restrict__ acc, int64_t lda, const Tin* __restrict__ x,
                                                            int64_t ldx, int cols) {
  float* a = acc + static_cast<int64_t>(blockIdx.x) * lda;
  const Tin* xr = x + static_cast<int64_t>(blockIdx.x) * ldx;
  for (int i = threadIdx.x * kVec; i < cols; i += kThreads * kVec) {
    float u[kVec], v[kVec];
    detail::load8(a + i, u);
    detail::load8(xr + i, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) u[k] += v[k];
    detail::store8(a + i, u);
  }
}

void check_vectorizable(const DeviceTensor& t, const char* what) {
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16) {
    throw Error(std::string(what) + ": expected f32 or bf16, got " + t.describe());
  }
  if (t.cols % kVec != 0 || (t.ld * dtype_size(t.dtype)) % 16 != 0 || reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    throw Error(std::string(what) + ": needs cols % 8 == 0 and 16-byte aligned rows, got " + t.describe());
  }
}

template <typename Tin, typename Tout>
void launch_copy(const DeviceTensor& src, const int32_t* si, const DeviceTensor& dst, const int32_t* di, int64_t count,
                 cudaStream_t stream) {
  copy_rows_kernel<Tin, Tout><<<static_cast<unsigned>(count), kThreads, 0, stream>>>(
      src.as<Tin>(), src.ld, si, dst.as<Tout>(), dst.ld, di, static_cast<int>(src.cols));
}

}  // namespace

void copy_rows(const DeviceTensor& src, const int32_t* src_index, const DeviceTensor& dst, const int32_t* dst_index,
               int64_t count, cudaStream_t stream) {
  check_vectorizable(src, "copy_rows source");
  check_vectorizable(dst, "copy_rows destination");
  if (src.cols != dst.cols) throw Error("copy_rows: " + src.describe() + " → " + dst.describe() + " differ in columns");
  if ((src_index == nullptr && count > src.rows) || (dst_index == nullptr && count > dst.rows)) {
    throw Error("copy_rows: " + std::to_string(count) + " rows exceed " + src.describe() + " → " + dst.describe());
  }
  if (count == 0) return;
  const bool sb = src.dtype == DType::kBF16, db = dst.dtype == DType::kBF16;
  if (sb && db) launch_copy<bf16, bf16>(src, src_index, dst, dst_index, count, stream);
  if (sb && !db) launch_copy<bf16, float>(src, src_index, dst, dst_index, count, stream);
  if (!sb && db) launch_copy<float, bf16>(src, src_index, dst, dst_index, count, stream);
  if (!sb && !db) launch_copy<float, float>(src, src_index, dst, dst_index, count, stream);
  K3_CUDA_CHECK_LAUNCH("copy_rows");
}

void add_rows(const DeviceTensor& acc, const DeviceTensor& x, cudaStream_t stream) {
  expect_dtype(acc, DType::kF32, "add_rows accumulator");
  check_vectorizable(acc, "add_rows accumulator");
  check_vectorizable(x, "add_rows input");
  expect_shape(x, acc.rows, acc.cols, "add_rows input");
  if (acc.rows == 0) return;
  const unsigned grid = static_cast<unsigned>(acc.rows);
  if (x.dtype == DType::kBF16) {
    add_rows_kernel<bf16><<<grid, kThreads, 0, stream>>>(acc.as<float>(), acc.ld, x.as<bf16>(), x.ld, static_cast<int>(acc.cols));
  } else {
    add_rows_kernel<float><<<grid, kThreads, 0, stream>>>(acc.as<float>(), acc.ld, x.as<float>(), x.ld, static_cast<int>(acc.cols));
  }
  K3_CUDA_CHECK_LAUNCH("add_rows");
}

}  // namespace k3::cuda
