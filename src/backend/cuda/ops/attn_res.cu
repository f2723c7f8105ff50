// AttnRes mix + RMSNorm (the CPU reference is cpu::attn_res_mix_norm). Two algorithms (AttnResAlgo):
//   one pass (default, rows up to 8192): the candidates are read once. A persistent CTA walks its
//     rows (blockIdx.x, + gridDim.x, …) and streams their candidate rows, one after another across
//     row boundaries, through kStages shared-memory buffers filled by bulk copies (bulk_copy.cuh):
//     kStages − 1 candidate rows are always in flight while one is read. Each thread takes its slice
//     of a candidate into registers once; the block reduces the two sums (Σ v·c, Σ v²) — one barrier
//     per candidate, the partials double-buffered by parity — and the buffer read before that
//     barrier is refilled right after it. The softmax is online (running max and sum, the mix
//     rescaled only when the max grows); the mix stays in registers and c in shared memory, which
//     leaves ≤ 96 registers a thread: 3 CTAs (rows in flight) per multiprocessor at n = 7168.
//     H200, 9 × 8192×7168 bf16: 3, 4 or 6 stages and 2 or 3 CTAs per multiprocessor all take
//     420–441 µs (≈ 73% of 3.83 TB/s), so bytes in flight are not what limits it (not profiled yet).
//   two pass (rows up to 32768): pass 1 reads every candidate for its sums (warp partials parked in
//     shared memory, one barrier for all candidates); pass 2 reads them again (from L2 when it can:
//     a row of 9 bf16 candidates of 7168 is 129 KB) to form the mix.
// The one-pass mix is Σ_j e_j·v_j / Σ_j e_j with e_j = exp(s_j − running max): the CPU's
// Σ_j (exp(s_j − max)/sum)·v_j up to fp32 rounding.
#include <algorithm>

#include "backend/cuda/core/bulk_copy.cuh"
#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/device.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/ops/ops_tuning.h"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;
constexpr int kIters = 4;
static_assert(kIters == 4, "the one-pass sums combine four chains");
constexpr int kMaxWarps = 32;
constexpr int kOnePassThreads = 256;
constexpr int kStages = 3;  // candidate rows in shared memory (one pass)

template <typename Tin>
struct Candidates {
  const Tin* p[kMaxAttnResCandidates];
  int64_t ld[kMaxAttnResCandidates];
};

template <typename Tin, typename Tout>
__global__ void __maxnreg__(96) attn_res_one_pass_kernel(Candidates<Tin> cand, int count,
                                                                              const float* __restrict__ c,
                                                                              const float* __restrict__ norm_w,
                                                                              float eps, Tout* __restrict__ y,
                                                                              int64_t ldy, int rows, int n) {
  extern __shared__ __align__(16) unsigned char smem[];  // c (n floats), then kStages candidate rows
  float* const c_s = reinterpret_cast<float*>(smem);
  Tin* const stage = reinterpret_cast<Tin*>(smem + static_cast<size_t>(n) * sizeof(float));
  __shared__ uint64_t full[kStages];
  __shared__ float partial[2][2][kOnePassThreads / 32];
  __shared__ float scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int my_rows = (rows - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  const int items = my_rows * count;  // item t: candidate t % count of this CTA's row t / count
  const unsigned row_bytes = static_cast<unsigned>(n) * sizeof(Tin);
  auto issue = [&](int t) {  // thread 0
    if (t >= items) return;
    const int r = t / count, j = t - r * count, s = t % kStages;
    const int64_t row = blockIdx.x + static_cast<int64_t>(r) * gridDim.x;
    bulk::arrive_expect(&full[s], row_bytes);
    bulk::copy(stage + static_cast<int64_t>(s) * n, cand.p[j] + row * cand.ld[j], row_bytes, &full[s]);
  };
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) bulk::init(&full[s]);
    bulk::fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int t = 0; t < kStages - 1; ++t) issue(t);
  }

  for (int i = threadIdx.x * 4; i < n; i += blockDim.x * 4) {
    *reinterpret_cast<float4*>(c_s + i) = *reinterpret_cast<const float4*>(c + i);
  }
  __syncthreads();

  for (int r = 0, t = 0; r < my_rows; ++r) {
    float mix[kIters][kVec];
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) mix[it][k] = 0.0f;
    }
    float run_max = -INFINITY, run_sum = 0.0f;
    for (int j = 0; j < count; ++j, ++t) {
      const int s = t % kStages;
      bulk::wait(&full[s], static_cast<unsigned>(t / kStages) & 1u);
      detail::Packed8<Tin> cur[kIters];
      float dots[kIters], sss[kIters];  // independent chains, summed in a fixed order
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int i = (it * blockDim.x + threadIdx.x) * kVec;
        dots[it] = 0.0f;
        sss[it] = 0.0f;
        if (i < n) {
          cur[it].load(stage + static_cast<int64_t>(s) * n + i);
          float a[kVec], cv[kVec];
          cur[it].unpack(a);
          detail::load8(c_s + i, cv);
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            dots[it] += a[k] * cv[k];
            sss[it] += a[k] * a[k];
          }
        }
      }
      float dot = (dots[0] + dots[1]) + (dots[2] + dots[3]), ss = (sss[0] + sss[1]) + (sss[2] + sss[3]);
      dot = detail::warp_sum(dot);
      ss = detail::warp_sum(ss);
      const int slot = t & 1;  // the slot written two candidates ago was read before the last barrier
      if (lane == 0) {
        partial[slot][0][warp] = dot;
        partial[slot][1][warp] = ss;
      }
      __syncthreads();
      // Every thread is past its reads of the previous candidate's buffer: refill it.
      if (threadIdx.x == 0) issue(t + kStages - 1);
      dot = 0.0f;
      ss = 0.0f;
#pragma unroll
      for (int w = 0; w < kOnePassThreads / 32; ++w) {  // the same order in every thread: all agree on s_j
        if (w < warps) {
          dot += partial[slot][0][w];
          ss += partial[slot][1][w];
        }
      }
      const float score = dot * (1.0f / sqrtf(ss / static_cast<float>(n) + eps));
      const float e = expf(score - fmaxf(run_max, score));
      if (score > run_max) {  // the same branch in every thread; otherwise the rescale is exp(0) = 1
        const float rescale = expf(run_max - score);  // 0 at the first candidate
        run_sum *= rescale;
        run_max = score;
#pragma unroll
        for (int it = 0; it < kIters; ++it) {
#pragma unroll
          for (int k = 0; k < kVec; ++k) mix[it][k] *= rescale;
        }
      }
      run_sum += e;
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int i = (it * blockDim.x + threadIdx.x) * kVec;
        if (i < n) {
          float a[kVec];
          cur[it].unpack(a);
#pragma unroll
          for (int k = 0; k < kVec; ++k) mix[it][k] += e * a[k];
        }
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
    const float rn = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
    Tout* yr = y + (blockIdx.x + static_cast<int64_t>(r) * gridDim.x) * ldy;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i = (it * blockDim.x + threadIdx.x) * kVec;
      if (i < n) {
        float wv[kVec], out[kVec];
        detail::load8(norm_w + i, wv);
#pragma unroll
        for (int k = 0; k < kVec; ++k) out[k] = mix[it][k] * rn * wv[k];
        detail::store8(yr + i, out);
      }
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
    const auto kernel = attn_res_one_pass_kernel<Tin, Tout>;
    const size_t smem = static_cast<size_t>(n) * (sizeof(float) + kStages * sizeof(Tin));
    if (smem > 48 * 1024) {
      allow_dynamic_smem(kernel, smem);
    }
    const int sms = current_multiprocessors();
    int per_sm = 0;
    K3_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    const int64_t ctas = std::min<int64_t>(y.rows, static_cast<int64_t>(std::max(per_sm, 1)) * sms);
    kernel<<<static_cast<unsigned>(ctas), threads, smem, stream>>>(cand, count, c, norm_w, eps, y.as<Tout>(), y.ld,
                                                                   static_cast<int>(y.rows), n);
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
  if (y.rows > INT32_MAX / kMaxAttnResCandidates) throw Error("attn_res_mix_norm: too many rows, got " + y.describe());
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

void attn_res_mix_norm(std::span<const DeviceTensor> candidates, const float* c, const float* norm_w, float eps,
                       const DeviceTensor& y, cudaStream_t stream) {
  attn_res_mix_norm(candidates, c, norm_w, eps, y, stream, AttnResAlgo::kOnePass);
}

}  // namespace k3::cuda
