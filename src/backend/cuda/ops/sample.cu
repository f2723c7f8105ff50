// Sampling on the device: one block of kThreads per logits row; thresholds found by bisection over
// full passes of the row (which stays in L2), the pick by a block scan of per-thread chunks.
#include <cfloat>

#include "backend/cuda/core/check.h"
#include "backend/cuda/ops/ops.h"
#include "core/error.h"

namespace k3::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kBisections = 40;

template <class T, class Op>
__device__ T block_reduce(T v, Op op, T* shared) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    T w = threadIdx.x < kThreads / 32 ? shared[threadIdx.x] : shared[0];
    for (int offset = 16; offset > 0; offset /= 2) w = op(w, __shfl_down_sync(0xffffffffu, w, offset));
    if (threadIdx.x == 0) shared[0] = w;
  }
  __syncthreads();
  const T result = shared[0];
  __syncthreads();
  return result;
}

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Min {
  __device__ float operator()(float a, float b) const { return fminf(a, b); }
};

__global__ void sample_rows_kernel(float* logits, int64_t ld, int32_t n, const SampleRowParams* params,
                                   const int32_t* offsets, const int32_t* ids, const float* amounts, int32_t* out) {
  __shared__ float shared[kThreads / 32];
  __shared__ float chunk_mass[kThreads];
  __shared__ int picked_chunk;
  __shared__ float residual;
  float* row = logits + blockIdx.x * ld;
  const SampleRowParams p = params[blockIdx.x];
  for (int32_t j = offsets[blockIdx.x] + threadIdx.x; j < offsets[blockIdx.x + 1]; j += kThreads) row[ids[j]] -= amounts[j];
  __syncthreads();
  float local_max = -FLT_MAX, local_min = FLT_MAX, bad = 0;
  for (int32_t c = threadIdx.x; c < n; c += kThreads) {
    const float v = row[c];
    if (!isfinite(v)) bad = 1;
    local_max = fmaxf(local_max, v);
    local_min = fminf(local_min, v);
  }
  if (block_reduce(bad, Max{}, shared) > 0) {
    if (threadIdx.x == 0) out[blockIdx.x] = -1;
    return;
  }
  const float top = block_reduce(local_max, Max{}, shared), bottom = block_reduce(local_min, Min{}, shared);
  if (p.greedy) {
    // The lowest id holding the maximum.
    float first = FLT_MAX;
    for (int32_t c = threadIdx.x; c < n; c += kThreads) {
      if (row[c] == top) first = fminf(first, static_cast<float>(c));
    }
    first = block_reduce(first, Min{}, shared);
    if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(first);
    return;
  }
  // top-k: the largest threshold t with at least k logits ≥ t.
  float t_k = bottom;
  if (p.top_k > 0 && p.top_k < n) {
    float lo = bottom, hi = top;
    for (int it = 0; it < kBisections; ++it) {
      const float mid = lo + (hi - lo) * 0.5f;
      float count = 0;
      for (int32_t c = threadIdx.x; c < n; c += kThreads) count += row[c] >= mid ? 1.0f : 0.0f;
      if (block_reduce(count, Sum{}, shared) >= static_cast<float>(p.top_k)) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    t_k = lo;
  }
  const float inv_t = 1.0f / p.temperature;
  auto prob = [&](float v) { return v >= t_k ? __expf((v - top) * inv_t) : 0.0f; };
  float z = 0;
  for (int32_t c = threadIdx.x; c < n; c += kThreads) z += prob(row[c]);
  z = block_reduce(z, Sum{}, shared);
  // top-p: the largest probability threshold whose kept mass still reaches top_p; min-p: p ≥ min_p · p(best) = min_p.
  float t_p = 0;
  if (p.top_p < 1.0f) {
    float lo = 0, hi = 1;
    for (int it = 0; it < kBisections; ++it) {
      const float mid = lo + (hi - lo) * 0.5f;
      float mass = 0;
      for (int32_t c = threadIdx.x; c < n; c += kThreads) {
        const float q = prob(row[c]);
        mass += q >= mid ? q : 0.0f;
      }
      if (block_reduce(mass, Sum{}, shared) >= p.top_p * z) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    t_p = lo;
  }
  const float threshold = fmaxf(t_p, p.min_p);
  auto kept = [&](float v) {
    const float q = prob(v);
    return q >= threshold && q > 0.0f ? q : 0.0f;
  };
  // The pick: chunks of consecutive ids per thread, scanned in id order.
  const int32_t per = (n + kThreads - 1) / kThreads, begin = threadIdx.x * per, end = min(n, begin + per);
  float mass = 0;
  int32_t last_kept = -1;
  for (int32_t c = begin; c < end; ++c) {
    const float q = kept(row[c]);
    mass += q;
    if (q > 0) last_kept = c;
  }
  chunk_mass[threadIdx.x] = mass;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (int t = 0; t < kThreads; ++t) total += chunk_mass[t];
    const float target = static_cast<float>(p.u) * total;
    float before = 0;
    int chunk = -1;
    for (int t = 0; t < kThreads; ++t) {
      if (chunk_mass[t] <= 0) continue;
      chunk = t;
      if (before + chunk_mass[t] > target) break;
      before += chunk_mass[t];  // no break (rounding): the last kept id of the last chunk
    }
    picked_chunk = chunk;
    residual = target - before;
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) == picked_chunk) {
    float acc = 0;
    int32_t chosen = last_kept;
    for (int32_t c = begin; c < end; ++c) {
      const float q = kept(row[c]);
      acc += q;
      if (q > 0 && acc > residual) {
        chosen = c;
        break;
      }
    }
    out[blockIdx.x] = chosen;
  }
}

}  // namespace

void sample_rows(const DeviceTensor& logits, const SampleRowParams* params, const int32_t* penalty_offsets,
                 const int32_t* penalty_ids, const float* penalty_amounts, int32_t* out, cudaStream_t stream) {
  if (logits.dtype != DType::kF32) throw Error("sample_rows: logits must be f32");
  if (logits.rows == 0) return;
  sample_rows_kernel<<<static_cast<unsigned>(logits.rows), kThreads, 0, stream>>>(
      static_cast<float*>(logits.data), logits.ld, static_cast<int32_t>(logits.cols), params, penalty_offsets, penalty_ids,
      penalty_amounts, out);
  K3_CUDA_CHECK_LAUNCH("sample_rows_kernel");
}

}  // namespace k3::cuda
