// Greedy next tokens on the device: one block per logits row. A vocabulary row (Kimi-K3: 163840
// floats) is one block's work and bound by latency, not bandwidth: each thread keeps kUnroll 16-byte
// loads in flight per round rather than one dependent load per iteration.
#include <cfloat>
#include <cstdint>

#include "backend/cuda/core/check.h"
#include "core/error.h"
#include "backend/cuda/ops/ops.h"

namespace k3::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kUnroll = 4;  // float4 loads a thread has in flight

struct Best {
  float value;
  int32_t index;  // −1: a non-finite value was seen
};

// The larger value, the lower index on a tie, −1 once either side saw a non-finite value: a total
// order, so the result does not depend on which thread saw which element.
__device__ Best better(Best a, Best b) {
  if (a.index < 0 || b.index < 0) return {0.0f, -1};
  if (a.value != b.value) return a.value > b.value ? a : b;
  return a.index < b.index ? a : b;
}

__device__ Best take(Best best, float v, int32_t c) { return isfinite(v) ? better(best, {v, c}) : Best{0.0f, -1}; }

// kVec4: every row starts 16-byte aligned, so its first n / 4 · 4 values go by as float4.
template <bool kVec4>
__global__ void __launch_bounds__(kThreads) row_argmax_kernel(const float* logits, int64_t ld, int32_t n, int32_t* out) {
  const float* row = logits + blockIdx.x * ld;
  Best best{-FLT_MAX, n};  // index n: nothing yet (loses every tie)
  int32_t tail = 0;
  if constexpr (kVec4) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int32_t n4 = n / 4;
    for (int32_t i = threadIdx.x; i < n4; i += kThreads * kUnroll) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (i + u * kThreads < n4) v[u] = row4[i + u * kThreads];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int32_t j = i + u * kThreads;
        if (j < n4) {
          best = take(best, v[u].x, 4 * j);
          best = take(best, v[u].y, 4 * j + 1);
          best = take(best, v[u].z, 4 * j + 2);
          best = take(best, v[u].w, 4 * j + 3);
        }
      }
    }
    tail = n4 * 4;
  }
  for (int32_t c = tail + static_cast<int32_t>(threadIdx.x); c < n; c += kThreads) best = take(best, row[c], c);
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
  const auto* data = static_cast<const float*>(logits.data);
  const bool vec4 = reinterpret_cast<uintptr_t>(data) % 16 == 0 && logits.ld % 4 == 0;
  const auto kernel = vec4 ? row_argmax_kernel<true> : row_argmax_kernel<false>;
  kernel<<<static_cast<unsigned>(logits.rows), kThreads, 0, stream>>>(data, logits.ld, static_cast<int32_t>(logits.cols), out);
  K3_CUDA_CHECK_LAUNCH("row_argmax_kernel");
}

}  // namespace k3::cuda
