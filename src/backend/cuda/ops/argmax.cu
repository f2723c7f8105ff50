// Greedy next tokens on the device: one block per logits row.
#include <cfloat>

#include "backend/cuda/core/check.h"
#include "core/error.h"
#include "backend/cuda/ops/ops.h"

namespace k3::cuda {
namespace {

constexpr int kThreads = 512;

struct Best {
  float value;
  int32_t index;  // −1: a non-finite value was seen
};

__device__ Best better(Best a, Best b) {
  if (a.index < 0 || b.index < 0) return {0.0f, -1};
  if (a.value != b.value) return a.value > b.value ? a : b;
  return a.index < b.index ? a : b;
}

__global__ void row_argmax_kernel(const float* logits, int64_t ld, int32_t n, int32_t* out) {
  const float* row = logits + blockIdx.x * ld;
  Best best{-FLT_MAX, n};  // index n: nothing yet (loses every tie)
  for (int32_t c = threadIdx.x; c < n; c += kThreads) {
    const float v = row[c];
    if (!isfinite(v)) {
      best = {0.0f, -1};
      break;
    }
    best = better(best, {v, c});
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const Best other{__shfl_down_sync(0xffffffffu, best.value, offset), __shfl_down_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  __shared__ Best warp_best[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    Best b = warp_best[0];
    for (int w = 1; w < kThreads / 32; ++w) b = better(b, warp_best[w]);
    out[blockIdx.x] = b.index;
  }
}

}  // namespace

void row_argmax(const DeviceTensor& logits, int32_t* out, cudaStream_t stream) {
  if (logits.dtype != DType::kF32) throw Error("row_argmax: logits must be f32");
  if (logits.rows == 0) return;
  row_argmax_kernel<<<static_cast<unsigned>(logits.rows), kThreads, 0, stream>>>(
      static_cast<const float*>(logits.data), logits.ld, static_cast<int32_t>(logits.cols), out);
  K3_CUDA_CHECK_LAUNCH("row_argmax_kernel");
}

}  // namespace k3::cuda
