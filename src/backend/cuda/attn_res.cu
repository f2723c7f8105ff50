// AttnRes mix + RMSNorm, one CTA per row (the CPU reference is cpu::attn_res_mix_norm).
// Pass 1 reads every candidate once for its two sums (Σ v·c and Σ v²): per candidate each warp
// reduces by shuffles and parks its partials in shared memory, so the block synchronises once for
// all candidates. Pass 2 reads the candidates again (from L2: a row of 9 bf16 candidates of 7168 is
// 129 KB) to form the mix in registers, then the norm and the write.
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/ops.h"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;
constexpr int kIters = 4;
constexpr int kMaxWarps = 32;

template <typename Tin>
struct Candidates {
  const Tin* p[kMaxAttnResCandidates];
  int64_t ld[kMaxAttnResCandidates];
};

template <typename Tin, typename Tout>
__global__ void __launch_bounds__(1024) attn_res_kernel(Candidates<Tin> cand, int count,
                                                        const float* __restrict__ c,
                                                        const float* __restrict__ norm_w, float eps,
                                                        Tout* __restrict__ y, int64_t ldy, int n) {
  __shared__ float partial[kMaxAttnResCandidates][2][kMaxWarps];
  __shared__ float score[kMaxAttnResCandidates];
  __shared__ float scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t row = blockIdx.x;

  for (int j = 0; j < count; ++j) {
    const Tin* v = cand.p[j] + row * cand.ld[j];
    float dot = 0.0f, ss = 0.0f;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i = (it * blockDim.x + threadIdx.x) * kVec;
      if (i < n) {
        float a[kVec], cv[kVec];
        detail::load8(v + i, a);
        detail::load8(c + i, cv);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          dot += a[k] * cv[k];
          ss += a[k] * a[k];
        }
      }
    }
    dot = detail::warp_sum(dot);
    ss = detail::warp_sum(ss);
    if (lane == 0) {
      partial[j][0][warp] = dot;
      partial[j][1][warp] = ss;
    }
  }
  __syncthreads();
  if (threadIdx.x < count) {
    const int j = threadIdx.x;
    float dot = 0.0f, ss = 0.0f;
    for (int w = 0; w < warps; ++w) {
      dot += partial[j][0][w];
      ss += partial[j][1][w];
    }
    score[j] = dot * (1.0f / sqrtf(ss / static_cast<float>(n) + eps));
  }
  __syncthreads();

  // Softmax over the candidates, in the CPU's order (every thread computes the same values).
  float mx = -INFINITY;
  for (int j = 0; j < count; ++j) mx = fmaxf(mx, score[j]);
  float sum = 0.0f;
  for (int j = 0; j < count; ++j) sum += expf(score[j] - mx);

  float mix[kIters][kVec];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) mix[it][k] = 0.0f;
  }
  for (int j = 0; j < count; ++j) {
    const float pj = expf(score[j] - mx) / sum;
    const Tin* v = cand.p[j] + row * cand.ld[j];
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i = (it * blockDim.x + threadIdx.x) * kVec;
      if (i < n) {
        float a[kVec];
        detail::load8(v + i, a);
#pragma unroll
        for (int k = 0; k < kVec; ++k) mix[it][k] += pj * a[k];
      }
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) ss += mix[it][k] * mix[it][k];
  }
  ss = detail::block_sum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  Tout* yr = y + row * ldy;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = (it * blockDim.x + threadIdx.x) * kVec;
    if (i < n) {
      float wv[kVec], out[kVec];
      detail::load8(norm_w + i, wv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) out[k] = mix[it][k] * r * wv[k];
      detail::store8(yr + i, out);
    }
  }
}

// Dynamic shared memory (unused) that leaves room for only `ctas_per_sm` CTAs on a multiprocessor.
template <typename Tin, typename Tout>
size_t occupancy_limiter(int ctas_per_sm) {
  if (ctas_per_sm <= 0) return 0;
  int device = 0, per_sm = 0;
  K3_CUDA_CHECK(cudaGetDevice(&device));
  K3_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  cudaFuncAttributes attr{};
  K3_CUDA_CHECK(cudaFuncGetAttributes(&attr, attn_res_kernel<Tin, Tout>));
  // Each CTA also takes 1 KB of reserved shared memory.
  const long bytes = per_sm / ctas_per_sm - static_cast<long>(attr.sharedSizeBytes) - 1024 - 64;
  if (bytes <= 0) return 0;
  K3_CUDA_CHECK(cudaFuncSetAttribute(attn_res_kernel<Tin, Tout>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  return static_cast<size_t>(bytes);
}

template <typename Tin, typename Tout>
void launch(std::span<const DeviceTensor> candidates, const float* c, const float* norm_w, float eps,
            const DeviceTensor& y, cudaStream_t stream, int ctas_per_sm) {
  Candidates<Tin> cand{};
  for (size_t j = 0; j < candidates.size(); ++j) {
    cand.p[j] = candidates[j].as<const Tin>();
    cand.ld[j] = candidates[j].ld;
  }
  const int n = static_cast<int>(y.cols);
  const int vectors = (n + kVec - 1) / kVec;
  const int threads = ((vectors + kIters - 1) / kIters + 31) / 32 * 32;
  const size_t smem = occupancy_limiter<Tin, Tout>(ctas_per_sm);
  attn_res_kernel<Tin, Tout><<<static_cast<unsigned>(y.rows), threads, smem, stream>>>(
      cand, static_cast<int>(candidates.size()), c, norm_w, eps, y.as<Tout>(), y.ld, n);
  K3_CUDA_CHECK_LAUNCH("attn_res_kernel");
}

}  // namespace

void attn_res_mix_norm(std::span<const DeviceTensor> candidates, const float* c, const float* norm_w, float eps,
                       const DeviceTensor& y, cudaStream_t stream, int ctas_per_sm) {
  if (candidates.empty() || candidates.size() > static_cast<size_t>(kMaxAttnResCandidates)) {
    throw Error("attn_res_mix_norm: 1.." + std::to_string(kMaxAttnResCandidates) + " candidates, got " +
                std::to_string(candidates.size()));
  }
  const DType tin = candidates[0].dtype;
  for (const DeviceTensor& t : candidates) {
    expect_dtype(t, tin, "attn_res_mix_norm candidate");
    expect_shape(t, y.rows, y.cols, "attn_res_mix_norm candidate");
    if (!vec8_ok(t)) throw Error("attn_res_mix_norm: needs cols % 8 == 0 and 16-byte aligned rows, got " + t.describe());
  }
  if (!vec8_ok(y) || reinterpret_cast<uintptr_t>(c) % 16 != 0 || reinterpret_cast<uintptr_t>(norm_w) % 16 != 0) {
    throw Error("attn_res_mix_norm: needs cols % 8 == 0 and 16-byte aligned rows and weights, got " + y.describe());
  }
  if (y.cols > 32768) throw Error("attn_res_mix_norm: rows wider than 32768 are not supported, got " + y.describe());
  if (y.rows == 0 || y.cols == 0) return;
  const bool xf = tin == DType::kF32, yf = y.dtype == DType::kF32;
  if ((!xf && tin != DType::kBF16) || (!yf && y.dtype != DType::kBF16)) {
    throw Error("attn_res_mix_norm: f32 or bf16 only, got " + candidates[0].describe() + " -> " + y.describe());
  }
  if (xf && yf) launch<float, float>(candidates, c, norm_w, eps, y, stream, ctas_per_sm);
  if (xf && !yf) launch<float, bf16>(candidates, c, norm_w, eps, y, stream, ctas_per_sm);
  if (!xf && yf) launch<bf16, float>(candidates, c, norm_w, eps, y, stream, ctas_per_sm);
  if (!xf && !yf) launch<bf16, bf16>(candidates, c, norm_w, eps, y, stream, ctas_per_sm);
}

}  // namespace k3::cuda
