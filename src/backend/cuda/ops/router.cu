// MoE router (CPU reference: route() in backend/cpu/moe.cpp). Two kernels:
//   warp (no group restriction, E <= 1024, the Kimi-K3 case): one warp per token, expert e in lane
//     e % 32, slot e / 32 of registers (8, 16 or 32 slots, the fewest that hold E); each lane keeps
//     its best untaken expert and only the lane that lost its best rescans, so a pick is one 5-step
//     shuffle arg-max.
//   block (any config): one CTA per token, scores and biased choices in shared memory, DeepSeek
//     group selection, then k rounds of a block arg-max.
// Both pick under the order (choice descending, expert index ascending), exactly the CPU's stable
// sort's order, so ties go to the lower index; the renormalising sum runs in pick order on one
// thread, as the CPU's.
#include <cfloat>
#include <climits>

#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/ops/ops_tuning.h"

namespace k3::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxGroups = 256;
constexpr int kMaxTopK = 64;
constexpr int kNone = INT_MAX;

// a before b in the selection order; kNone (an exhausted slot) comes after everything.
__device__ __forceinline__ bool before(float av, int ai, float bv, int bi) {
  return ai != kNone && (bi == kNone || av > bv || (av == bv && ai < bi));
}

constexpr int kMaxWarpSlots = 32;  // experts per lane: E <= 1024
constexpr int kWarpsPerCta = 4;

template <int kSlots>
__global__ void __launch_bounds__(32 * kWarpsPerCta) route_warp_kernel(RouterParams p, int64_t tokens,
                                                                       const float* __restrict__ logits, int64_t ldl,
                                                                       const float* __restrict__ bias,
                                                                       int32_t* __restrict__ ids, int64_t ldi,
                                                                       float* __restrict__ weights, int64_t ldw) {
  __shared__ int picked_id[kWarpsPerCta][kMaxTopK];
  __shared__ float picked_s[kWarpsPerCta][kMaxTopK];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + warp;
  if (t >= tokens) return;  // whole warp
  const int E = static_cast<int>(p.experts);
  const float* l = logits + t * ldl;
  float s[kSlots], choice[kSlots];
  uint32_t taken = 0;  // bit i: slot i picked or absent
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + 32 * i;
    s[i] = e < E ? l[e] : -INFINITY;
    if (e >= E) taken |= 1u << i;
  }
  if (p.sigmoid) {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) s[i] = 1.0f / (1.0f + expf(-s[i]));
  } else {
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) mx = fmaxf(mx, s[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) sum += (s[i] = expf(s[i] - mx));  // absent slots: exp(-inf) = 0
    sum = detail::warp_sum(sum);
#pragma unroll
    for (int i = 0; i < kSlots; ++i) s[i] /= sum;
  }
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + 32 * i;
    choice[i] = s[i] + (bias != nullptr && e < E ? bias[e] : 0.0f);
  }
  // This lane's best untaken slot; slots scan in ascending expert order, so strict > keeps the
  // lower index among equals. (A pairwise tree over the slots measured slower on the H200: 32 vs
  // 21 µs for one Kimi-K3 token — the copies it needs outweigh the shorter dependency chain.)
  auto local_best = [&](float& bv, int& bi, float& bs) {
    bv = 0.0f;
    bi = kNone;
    bs = 0.0f;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      if (!((taken >> i) & 1u) && before(choice[i], lane + 32 * i, bv, bi)) {
        bv = choice[i];
        bi = lane + 32 * i;
        bs = s[i];
      }
    }
  };
  float mv, ms;
  int mi;
  local_best(mv, mi, ms);
  for (int k = 0; k < p.top_k; ++k) {
    float bv = mv, bs = ms;
    int bi = mi;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, o);
      const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
      const float os = __shfl_xor_sync(0xFFFFFFFFu, bs, o);
      if (before(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
        bs = os;
      }
    }
    if (lane == 0) {
      picked_id[warp][k] = bi;
      picked_s[warp][k] = bs;
    }
    if (bi == mi) {  // this lane owned the winner: drop it and find its next best
      taken |= 1u << (bi >> 5);
      local_best(mv, mi, ms);
    }
  }
  __syncwarp();
  if (lane == 0) {
    float total = 0.0f;
    for (int k = 0; k < p.top_k; ++k) total += picked_s[warp][k];
    int32_t* out_i = ids + t * ldi;
    float* out_w = weights + t * ldw;
    for (int k = 0; k < p.top_k; ++k) {
      float w = picked_s[warp][k];
      if (p.renormalize) w /= total + 1e-20f;
      out_w[k] = w * p.scaling;
      out_i[k] = picked_id[warp][k];
    }
  }
}

template <int kSlots>
void launch_route_warp(const RouterParams& p, const DeviceTensor& logits, const float* bias, const DeviceTensor& ids,
                       const DeviceTensor& weights, cudaStream_t stream) {
  const int64_t blocks = (logits.rows + kWarpsPerCta - 1) / kWarpsPerCta;
  route_warp_kernel<kSlots><<<static_cast<unsigned>(blocks), 32 * kWarpsPerCta, 0, stream>>>(
      p, logits.rows, logits.as<const float>(), logits.ld, bias, ids.as<int32_t>(), ids.ld, weights.as<float>(),
      weights.ld);
  K3_CUDA_CHECK_LAUNCH("route_warp_kernel");
}

__global__ void __launch_bounds__(kThreads) route_kernel(RouterParams p, const float* __restrict__ logits,
                                                         int64_t ldl, const float* __restrict__ bias,
                                                         int32_t* __restrict__ ids, int64_t ldi,
                                                         float* __restrict__ weights, int64_t ldw) {
  extern __shared__ float smem[];
  const int E = static_cast<int>(p.experts);
  float* s = smem;                // unbiased scores
  float* choice = smem + E;       // selection values (biased, group-masked)
  unsigned char* taken = reinterpret_cast<unsigned char*>(smem + 2 * E);
  __shared__ float red_v[kThreads / 32];
  __shared__ int red_i[kThreads / 32];
  __shared__ float gscore[kMaxGroups];
  __shared__ unsigned char gkeep[kMaxGroups];
  __shared__ int picked[kMaxTopK];
  __shared__ float scratch[32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* l = logits + static_cast<int64_t>(blockIdx.x) * ldl;

  if (p.sigmoid) {
    for (int e = tid; e < E; e += kThreads) s[e] = 1.0f / (1.0f + expf(-l[e]));
  } else {
    float mx = -INFINITY;
    for (int e = tid; e < E; e += kThreads) mx = fmaxf(mx, l[e]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    if (lane == 0) red_v[warp] = mx;
    __syncthreads();
    mx = red_v[0];
    for (int w = 1; w < kThreads / 32; ++w) mx = fmaxf(mx, red_v[w]);
    float sum = 0.0f;
    for (int e = tid; e < E; e += kThreads) sum += (s[e] = expf(l[e] - mx));
    sum = detail::block_sum(sum, scratch);
    for (int e = tid; e < E; e += kThreads) s[e] /= sum;
  }
  for (int e = tid; e < E; e += kThreads) {
    choice[e] = s[e] + (bias != nullptr ? bias[e] : 0.0f);
    taken[e] = 0;
  }
  __syncthreads();

  const int groups = static_cast<int>(p.groups);
  if (groups > 1 && p.topk_group < groups) {
    const int per = E / groups;
    for (int g = tid; g < groups; g += kThreads) {
      float b1 = -INFINITY, b2 = -INFINITY;  // the two largest members (duplicates count twice)
      for (int e = g * per; e < (g + 1) * per; ++e) {
        const float v = choice[e];
        if (v > b1) {
          b2 = b1;
          b1 = v;
        } else if (v > b2) {
          b2 = v;
        }
      }
      gscore[g] = b1 + (per > 1 ? b2 : 0.0f);
      gkeep[g] = 0;
    }
    __syncthreads();
    if (tid == 0) {
      for (int i = 0; i < p.topk_group; ++i) {
        int best = kNone;
        float bv = 0.0f;
        for (int g = 0; g < groups; ++g) {
          if (!gkeep[g] && before(gscore[g], g, bv, best)) {
            best = g;
            bv = gscore[g];
          }
        }
        gkeep[best] = 1;
      }
    }
    __syncthreads();
    for (int e = tid; e < E; e += kThreads) {
      if (!gkeep[e / per]) choice[e] = -INFINITY;
    }
    __syncthreads();
  }

  for (int i = 0; i < p.top_k; ++i) {
    float bv = 0.0f;
    int bi = kNone;
    for (int e = tid; e < E; e += kThreads) {
      if (!taken[e] && before(choice[e], e, bv, bi)) {
        bv = choice[e];
        bi = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, o);
      const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
      if (before(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      red_v[warp] = bv;
      red_i[warp] = bi;
    }
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < kThreads / 32; ++w) {
        if (before(red_v[w], red_i[w], bv, bi)) {
          bv = red_v[w];
          bi = red_i[w];
        }
      }
      picked[i] = bi;
      taken[bi] = 1;
    }
    __syncthreads();
  }

  if (tid == 0) {
    float total = 0.0f;
    for (int i = 0; i < p.top_k; ++i) total += s[picked[i]];
    int32_t* out_i = ids + static_cast<int64_t>(blockIdx.x) * ldi;
    float* out_w = weights + static_cast<int64_t>(blockIdx.x) * ldw;
    for (int i = 0; i < p.top_k; ++i) {
      float w = s[picked[i]];
      if (p.renormalize) w /= total + 1e-20f;
      out_w[i] = w * p.scaling;
      out_i[i] = picked[i];
    }
  }
}

}  // namespace

void moe_route(const RouterParams& p, const DeviceTensor& logits, const float* bias, const DeviceTensor& ids,
               const DeviceTensor& weights, cudaStream_t stream, RouterKernel kernel) {
  expect_dtype(logits, DType::kF32, "moe_route logits");
  expect_dtype(ids, DType::kI32, "moe_route ids");
  expect_dtype(weights, DType::kF32, "moe_route weights");
  expect_shape(logits, logits.rows, p.experts, "moe_route logits");
  expect_shape(ids, logits.rows, p.top_k, "moe_route ids");
  expect_shape(weights, logits.rows, p.top_k, "moe_route weights");
  if (p.experts < 1 || p.experts > 16384) throw Error("moe_route: 1..16384 experts supported");
  if (p.top_k < 1 || p.top_k > kMaxTopK || p.top_k > p.experts) throw Error("moe_route: bad top_k");
  if (p.groups < 1 || p.groups > kMaxGroups || p.experts % p.groups != 0 || p.topk_group < 1 ||
      p.topk_group > p.groups) {
    throw Error("moe_route: groups must divide the experts (at most 256) and 1 <= topk_group <= groups");
  }
  if (logits.rows == 0) return;
  const bool grouped = p.groups > 1 && p.topk_group < p.groups;
  const bool warp_ok = !grouped && p.experts <= 32 * kMaxWarpSlots;
  if (kernel == RouterKernel::kWarp && !warp_ok) throw Error("moe_route: the warp kernel takes E <= 1024, no groups");
  if (kernel != RouterKernel::kBlock && warp_ok) {
    if (p.experts <= 32 * 8) {
      launch_route_warp<8>(p, logits, bias, ids, weights, stream);
    } else if (p.experts <= 32 * 16) {
      launch_route_warp<16>(p, logits, bias, ids, weights, stream);
    } else {
      launch_route_warp<kMaxWarpSlots>(p, logits, bias, ids, weights, stream);
    }
    return;
  }
  const size_t smem = static_cast<size_t>(p.experts) * (2 * sizeof(float) + 1);
  if (smem > 48 * 1024) {
    allow_dynamic_smem(route_kernel, smem);
  }
  route_kernel<<<static_cast<unsigned>(logits.rows), kThreads, smem, stream>>>(
      p, logits.as<const float>(), logits.ld, bias, ids.as<int32_t>(), ids.ld, weights.as<float>(), weights.ld);
  K3_CUDA_CHECK_LAUNCH("route_kernel");
}

void moe_route(const RouterParams& p, const DeviceTensor& logits, const float* bias, const DeviceTensor& ids,
               const DeviceTensor& weights, cudaStream_t stream) {
  moe_route(p, logits, bias, ids, weights, stream, RouterKernel::kAuto);
}

}  // namespace k3::cuda
