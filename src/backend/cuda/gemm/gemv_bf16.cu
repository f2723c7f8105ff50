// Small-M bf16 GEMM (gemm.h's gemv_bf16): y[M,N] = x[M,K] · W[N,K]ᵀ for M ≤ kGemvMaxRows, the decode
// shapes where a GEMM is a stream over W. One warp per output row n: each lane loads 16 bytes (8 values)
// of W's row per step, kStepsInFlight steps at once (streaming loads that bypass L1), and multiplies
// them with the same 8 columns of every x row (x is small and shared by all warps: it stays in L1).
// Measured (docs/performance.md): ahead of cuBLASLt at M = 1 except on K3's o_proj (K = 12288), behind
// it on most shapes from M = 2 and on all from M = 4.
// fp32 accumulation per lane, then one warp reduction per x row.
#include <cuda_bf16.h>

#include <string>

#include "backend/cuda/core/check.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/core/kernel_util.cuh"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;
constexpr int kWarps = 8;  // output rows per CTA
// Weight loads a lane keeps in flight: more for one or two x rows, where the kernel is bound by load
// latency; fewer above, where the x loads from L1 and the FMAs share the issue slots.
constexpr int steps_in_flight(int m) { return m <= 2 ? 8 : 4; }

__device__ __forceinline__ void unpack(const uint4& raw, float (&v)[kVec]) {
  const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(u[i] << 16);
    v[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
  }
}

template <int M, typename Ty>
__global__ void __launch_bounds__(kWarps * 32) gemv_bf16_kernel(const bf16* __restrict__ x, int64_t ldx,
                                                               const bf16* __restrict__ w, int64_t ldw,
                                                               Ty* __restrict__ y, int64_t ldy, int n_rows, int k) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (n >= n_rows) return;  // whole warp
  const bf16* wr = w + static_cast<int64_t>(n) * ldw;
  float acc[M] = {};
  constexpr int kStepsInFlight = steps_in_flight(M);
  constexpr int kSpan = 32 * kVec;  // columns one warp step covers
  for (int k0 = lane * kVec; k0 < k; k0 += kSpan * kStepsInFlight) {
    uint4 raw[kStepsInFlight];
#pragma unroll
    for (int s = 0; s < kStepsInFlight; ++s) {
      const int c = k0 + s * kSpan;
      if (c < k) raw[s] = detail::load_streaming16(wr + c);
    }
#pragma unroll
    for (int s = 0; s < kStepsInFlight; ++s) {
      const int c = k0 + s * kSpan;
      if (c < k) {
        float wv[kVec];
        unpack(raw[s], wv);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xv[kVec];
          detail::load8(x + m * ldx + c, xv);
#pragma unroll
          for (int i = 0; i < kVec; ++i) acc[m] = fmaf(wv[i], xv[i], acc[m]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float sum = detail::warp_sum(acc[m]);
    if (lane == 0) detail::store1(y + m * ldy + n, sum);
  }
}

template <int M, typename Ty>
void launch(const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& y, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((w.rows + kWarps - 1) / kWarps);
  gemv_bf16_kernel<M, Ty><<<blocks, kWarps * 32, 0, stream>>>(x.as<const bf16>(), x.ld, w.as<const bf16>(), w.ld,
                                                              y.as<Ty>(), y.ld, static_cast<int>(w.rows),
                                                              static_cast<int>(w.cols));
  K3_CUDA_CHECK_LAUNCH("gemv_bf16_kernel");
}

template <typename Ty>
void launch_rows(const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& y, cudaStream_t stream) {
  switch (x.rows) {
    case 1: return launch<1, Ty>(x, w, y, stream);
    case 2: return launch<2, Ty>(x, w, y, stream);
    case 3: return launch<3, Ty>(x, w, y, stream);
    case 4: return launch<4, Ty>(x, w, y, stream);
    case 5: return launch<5, Ty>(x, w, y, stream);
    case 6: return launch<6, Ty>(x, w, y, stream);
    case 7: return launch<7, Ty>(x, w, y, stream);
    case 8: return launch<8, Ty>(x, w, y, stream);
    default: break;
  }
  static_assert(kGemvMaxRows == 8, "one instantiation per row count");
}

}  // namespace

void gemv_bf16(const DeviceTensor& x, const DeviceTensor& w, const DeviceTensor& y, cudaStream_t stream) {
  expect_dtype(x, DType::kBF16, "gemv_bf16 x");
  expect_dtype(w, DType::kBF16, "gemv_bf16 w");
  expect_shape(x, x.rows, w.cols, "gemv_bf16 x");
  expect_shape(y, x.rows, w.rows, "gemv_bf16 y");
  if (x.rows < 1 || x.rows > kGemvMaxRows) {
    throw Error("gemv_bf16: 1.." + std::to_string(kGemvMaxRows) + " rows, got " + x.describe());
  }
  if (!vec8_ok(x) || !vec8_ok(w)) {
    throw Error("gemv_bf16: needs K % 8 == 0 and 16-byte aligned rows, got " + x.describe() + " · " + w.describe());
  }
  if (w.rows > INT32_MAX || w.cols > INT32_MAX / 2) throw Error("gemv_bf16: too large, got " + w.describe());
  if (w.rows == 0) return;
  if (y.dtype == DType::kF32) {
    launch_rows<float>(x, w, y, stream);
  } else if (y.dtype == DType::kBF16) {
    launch_rows<bf16>(x, w, y, stream);
  } else {
    throw Error("gemv_bf16: y must be f32 or bf16, got " + y.describe());
  }
}

}  // namespace k3::cuda
