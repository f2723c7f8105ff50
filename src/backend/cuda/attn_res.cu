// AttnRes mix + RMSNorm, one CTA per row (the CPU reference is cpu::attn_res_mix_norm). Two
// algorithms (AttnResAlgo):
//   one pass (default, rows up to 8192): the candidates are read once. Each candidate's slice sits in
//     registers while the block reduces its two sums (Σ v·c, Σ v²) — one barrier per candidate,
//     the partials double-buffered by parity — and the next candidate's load is already in flight;
//     the softmax is online (running max and sum, the mix rescaled when the max grows), the mix
//     stays in registers, and c sits in shared memory.
//   two pass (rows up to 32768): pass 1 reads every candidate for its sums (warp partials parked in
//     shared memory, one barrier for all candidates); pass 2 reads them again (from L2 when it can:
//     a row of 9 bf16 candidates of 7168 is 129 KB) to form the mix.
// The one-pass mix is Σ_j e_j·v_j / Σ_j e_j with e_j = exp(s_j − running max): the CPU's
// Σ_j (exp(s_j − max)/sum)·v_j up to fp32 rounding.
#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/ops.h"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;
constexpr int kIters = 4;
constexpr int kMaxWarps = 32;
constexpr int kOnePassThreads = 256;

template <typename Tin>
struct Candidates {
  const Tin* p[kMaxAttnResCandidates];
  int64_t ld[kMaxAttnResCandidates];
};

template <typename Tin, typename Tout>
__global__ void __launch_bounds__(kOnePassThreads, 2) attn_res_one_pass_kernel(Candidates<Tin> cand, int count,
                                                                              const float* __restrict__ c,
                                                                              const float* __restrict__ norm_w,
                                                                              float eps, Tout* __restrict__ y,
                                                                              int64_t ldy, int n) {
  extern __shared__ float c_s[];  // n floats
  __shared__ float partial[2][2][kOnePassThreads / 32];
  __shared__ float scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t row = blockIdx.x;

  detail::Packed8<Tin> cur[kIters], next[kIters];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = (it * blockDim.x + threadIdx.x) * kVec;
    if (i < n) next[it].load(cand.p[0] + row * cand.ld[0] + i);
  }
  for (int i = threadIdx.x * 4; i < n; i += blockDim.x * 4) {
    *reinterpret_cast<float4*>(c_s + i) = *reinterpret_cast<const float4*>(c + i);
  }
  __syncthreads();

  float mix[kIters][kVec];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) mix[it][k] = 0.0f;
  }
  float run_max = -INFINITY, run_sum = 0.0f;
  for (int j = 0; j < count; ++j) {
#pragma unroll
    for (int it = 0; it < kIters; ++it) cur[it] = next[it];
    if (j + 1 < count) {
      const Tin* v = cand.p[j + 1] + row * cand.ld[j + 1];
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int i = (it * blockDim.x + threadIdx.x) * kVec;
        if (i < n) next[it].load(v + i);
      }
    }
    float dot = 0.0f, ss = 0.0f;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i = (it * blockDim.x + threadIdx.x) * kVec;
      if (i < n) {
        float a[kVec];
        cur[it].unpack(a);
        const float4 c0 = *reinterpret_cast<const float4*>(c_s + i);
        const float4 c1 = *reinterpret_cast<const float4*>(c_s + i + 4);
        const float cv[kVec] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          dot += a[k] * cv[k];
          ss += a[k] * a[k];
        }
      }
    }
    dot = detail::warp_sum(dot);
    ss = detail::warp_sum(ss);
    const int slot = j & 1;  // the slot written two candidates ago was read before the last barrier
    if (lane == 0) {
      partial[slot][0][warp] = dot;
      partial[slot][1][warp] = ss;
    }
    __syncthreads();
    dot = 0.0f;
    ss = 0.0f;
    for (int w = 0; w < warps; ++w) {  // the same order in every thread: every thread agrees on s_j
      dot += partial[slot][0][w];
      ss += partial[slot][1][w];
    }
    const float score = dot * (1.0f / sqrtf(ss / static_cast<float>(n) + eps));
    const float new_max = fmaxf(run_max, score);
    const float rescale = expf(run_max - new_max);  // 0 at the first candidate
    const float e = expf(score - new_max);
    run_sum = run_sum * rescale + e;
    run_max = new_max;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      float a[kVec];
      cur[it].unpack(a);
#pragma unroll
      for (int k = 0; k < kVec; ++k) mix[it][k] = mix[it][k] * rescale + e * a[k];
    }
  }

  const float inv_sum = 1.0f / run_sum;
  float ss = 0.0f;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = (it * blockDim.x + threadIdx.x) * kVec;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      mix[it][k] = i < n ? mix[it][k] * inv_sum : 0.0f;
      ss += mix[it][k] * mix[it][k];
    }
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

template <typename Tin, typename Tout>
__global__ void __launch_bounds__(1024) attn_res_two_pass_kernel(Candidates<Tin> cand, int count,
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

template <typename Tin, typename Tout>
void launch(std::span<const DeviceTensor> candidates, const float* c, const float* norm_w, float eps,
            const DeviceTensor& y, cudaStream_t stream, AttnResAlgo algo) {
  Candidates<Tin> cand{};
  for (size_t j = 0; j < candidates.size(); ++j) {
    cand.p[j] = candidates[j].as<const Tin>();
    cand.ld[j] = candidates[j].ld;
  }
  const int n = static_cast<int>(y.cols), count = static_cast<int>(candidates.size());
  const int vectors = (n + kVec - 1) / kVec;
  const int threads = ((vectors + kIters - 1) / kIters + 31) / 32 * 32;
  if (algo == AttnResAlgo::kOnePass && threads <= kOnePassThreads) {
    const size_t smem = static_cast<size_t>(n) * sizeof(float);
    if (smem > 48 * 1024) {
      K3_CUDA_CHECK(cudaFuncSetAttribute(attn_res_one_pass_kernel<Tin, Tout>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    }
    attn_res_one_pass_kernel<Tin, Tout><<<static_cast<unsigned>(y.rows), threads, smem, stream>>>(
        cand, count, c, norm_w, eps, y.as<Tout>(), y.ld, n);
    K3_CUDA_CHECK_LAUNCH("attn_res_one_pass_kernel");
  } else {
    attn_res_two_pass_kernel<Tin, Tout><<<static_cast<unsigned>(y.rows), threads, 0, stream>>>(
        cand, count, c, norm_w, eps, y.as<Tout>(), y.ld, n);
    K3_CUDA_CHECK_LAUNCH("attn_res_two_pass_kernel");
  }
}

}  // namespace

void attn_res_mix_norm(std::span<const DeviceTensor> candidates, const float* c, const float* norm_w, float eps,
                       const DeviceTensor& y, cudaStream_t stream, AttnResAlgo algo) {
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
  if (xf && yf) launch<float, float>(candidates, c, norm_w, eps, y, stream, algo);
  if (xf && !yf) launch<float, bf16>(candidates, c, norm_w, eps, y, stream, algo);
  if (!xf && yf) launch<bf16, float>(candidates, c, norm_w, eps, y, stream, algo);
  if (!xf && !yf) launch<bf16, bf16>(candidates, c, norm_w, eps, y, stream, algo);
}

}  // namespace k3::cuda
