// KDA chunked prefill, part 2 (included by kda_chunk_inter.cu): the sequential pass over the chunks of a sequence for one head and
// a block of VB = 16 or 32 state columns (the delta rule acts on the columns of S independently),
// from the slot's state, which is written back at the end. Per chunk (spec §6.6):
//   V' = U − W S            [C × VB]
//   O  = Qg S + Aqk V'      [C × VB]   → the output rows of the chunk
//   S  = diag(gC) S + Kdᵀ V'
// The chunk's W / Qg+Aqk / Kd+gC arrive by cp.async in three groups, each issued as soon as the
// previous chunk is done with its buffer, so the loads overlap the other two products.
// The products in fp32 FMA (register tiles 4×2 / 4×VB/8, the state block also held in registers;
// with VB = 16 the [C × VB] products split their K range over two thread halves, so every thread
// keeps a 4×2 tile, and the halves meet in shared memory).
// kBulk = true: the three groups come by Hopper bulk copies (one cp.async.bulk per block, completing
// on one mbarrier per group, phase = chunk parity) instead of 16-byte cp.async by every thread.
#pragma once

#include "backend/cuda/core/bulk_copy.cuh"
#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/attention/kda/kda_internal.h"
#include "backend/cuda/core/kernel_util.cuh"

namespace k3::cuda::kda_detail {
namespace inter {

using detail::bf16;
constexpr int kThreads = 256;

template <int VB>
struct Smem {
  float wt[D * C];
  float qgt[D * C];
  float kd[C * D];
  float aqkt[C * C];
  float gc[D];
  float s[D * VB];    // the state block S[:, vb·VB …]
  float vp[C * VB];   // V'
  float ot[C * VB];   // K-half partial sums (VB = 16)
  uint64_t bar[3];    // bulk-copy barriers of the W, Qg+Aqk and Kd+gC groups
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void copy_async(float* dst, const float* src, int floats) {
  for (int i = threadIdx.x * 4; i < floats; i += kThreads * 4) cp_async16(dst + i, src + i);
}

template <int N>
__device__ __forceinline__ void ld_vec(const float* p, float (&v)[N]) {
  static_assert(N == 2 || N == 4);
  if constexpr (N == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
  } else {
    const float2 t = *reinterpret_cast<const float2*>(p);
    v[0] = t.x, v[1] = t.y;
  }
}
template <int N>
__device__ __forceinline__ void st_vec(float* p, const float (&v)[N]) {
  static_assert(N == 2 || N == 4);
  if constexpr (N == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
  }
}

__device__ __forceinline__ void store_out(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_out(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

template <int VB, bool kBulk, typename Tout>
__global__ void __launch_bounds__(kThreads, 1) chunk_inter_kernel(PrefillArgs a) {
  static_assert(VB == 16 || VB == 32);
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem<VB>& sm = *reinterpret_cast<Smem<VB>*>(smem_raw);
  const int vb = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
  const int seq0 = a.batch.cu_seqlens[s], len = a.batch.cu_seqlens[s + 1] - seq0;
  if (len <= 0) return;
  const int nch = (len + C - 1) / C;
  const int tid = threadIdx.x;
  float* state = a.state + static_cast<int64_t>(a.batch.slots[s]) * a.heads * D * D + static_cast<int64_t>(h) * D * D +
                 vb * VB;
  Tout* out = static_cast<Tout*>(a.o);
  auto chunk_ws = [&](int c) -> const float* {
    const int64_t slot = seq0 / C + s + c;
    return a.ws + (slot * a.heads + h) * static_cast<int64_t>(kFloatsPerChunkHead);
  };

  // Thread tiles: (a, b) 4 rows × 2 columns of [C × VB] over K part ks of KS;
  // (c) 4 × CC of [D × VB].
  constexpr int KS = 32 / VB, TPK = kThreads / KS, CC = VB / 8;
  const int ks = tid / TPK, tk = tid % TPK;
  const int rg = tk / (VB / 2), cp2 = (tk % (VB / 2)) * 2;  // rows 4·rg…, columns cp2, cp2+1
  const int dg = tid >> 3, cc = (tid & 7) * CC;             // rows 4·dg…, columns cc…cc+CC−1
  float sreg[4][CC];
  for (int r = 0; r < 4; ++r) {
    ld_vec(state + (4 * dg + r) * D + cc, sreg[r]);
    st_vec(&sm.s[(4 * dg + r) * VB + cc], sreg[r]);
  }
  // Sums the K parts of a 4×2 tile into the ks = 0 threads (a barrier for every thread when KS > 1).
  auto join_parts = [&](float (&acc)[4][2]) {
    if constexpr (KS > 1) {
      static_assert(KS == 2);
      float2* part = reinterpret_cast<float2*>(sm.ot);
      if (ks == 1) {
        for (int r = 0; r < 4; ++r) part[((4 * rg + r) * VB + cp2) / 2] = make_float2(acc[r][0], acc[r][1]);
      }
      __syncthreads();
      if (ks == 0) {
        for (int r = 0; r < 4; ++r) {
          const float2 p2 = part[((4 * rg + r) * VB + cp2) / 2];
          acc[r][0] += p2.x, acc[r][1] += p2.y;
        }
      }
    }
  };

  // The three load groups (issued for chunk c + 1 as soon as chunk c is done with the buffers).
  auto issue_w = [&](const float* w) {
    if constexpr (kBulk) {
      if (tid == 0) {
        bulk::arrive_expect(&sm.bar[0], D * C * 4);
        bulk::copy(sm.wt, w + kOffWt, D * C * 4, &sm.bar[0]);
      }
    } else {
      copy_async(sm.wt, w + kOffWt, D * C);
    }
  };
  auto issue_qa = [&](const float* w) {
    if constexpr (kBulk) {
      if (tid == 0) {
        bulk::arrive_expect(&sm.bar[1], (D * C + C * C) * 4);
        bulk::copy(sm.qgt, w + kOffQgt, D * C * 4, &sm.bar[1]);
        bulk::copy(sm.aqkt, w + kOffAqkt, C * C * 4, &sm.bar[1]);
      }
    } else {
      copy_async(sm.qgt, w + kOffQgt, D * C);
      copy_async(sm.aqkt, w + kOffAqkt, C * C);
    }
  };
  auto issue_kd = [&](const float* w) {
    if constexpr (kBulk) {
      if (tid == 0) {
        bulk::arrive_expect(&sm.bar[2], (C * D + D) * 4);
        bulk::copy(sm.kd, w + kOffKd, C * D * 4, &sm.bar[2]);
        bulk::copy(sm.gc, w + kOffGc, D * 4, &sm.bar[2]);
      }
    } else {
      copy_async(sm.kd, w + kOffKd, C * D);
      copy_async(sm.gc, w + kOffGc, D);
    }
  };
  if constexpr (kBulk) {
    if (tid == 0) {
      for (int i = 0; i < 3; ++i) bulk::init(&sm.bar[i]);
      bulk::fence_init();
    }
    __syncthreads();
  }
  // Prologue: the three groups of chunk 0.
  {
    const float* w0 = chunk_ws(0);
    issue_w(w0);
    cp_commit();
    issue_qa(w0);
    cp_commit();
    issue_kd(w0);
    cp_commit();
  }

  for (int c = 0; c < nch; ++c) {
    const float* wsc = chunk_ws(c);
    const float* wsn = c + 1 < nch ? chunk_ws(c + 1) : nullptr;
    const int n = min(C, len - c * C);
    const int64_t row0 = seq0 + static_cast<int64_t>(c) * C;
    // U block of this thread's (a) tile, straight from global memory (L2).
    float u[4][2] = {};
    if (ks == 0) {
#pragma unroll
      for (int r = 0; r < 4; ++r) ld_vec(wsc + kOffU + (4 * rg + r) * D + vb * VB + cp2, u[r]);
    }
    if constexpr (kBulk) {
      bulk::wait(&sm.bar[0], c & 1);
    } else {
      cp_wait<2>();
    }
    __syncthreads();  // W(c) landed; S(c) in shared memory

    // (a) V' = U − W S
    float wsacc[4][2] = {};
#pragma unroll 4
    for (int kk = ks * (D / KS); kk < (ks + 1) * (D / KS); ++kk) {
      const float4 w4 = *reinterpret_cast<const float4*>(&sm.wt[kk * C + 4 * rg]);
      const float2 s2 = *reinterpret_cast<const float2*>(&sm.s[kk * VB + cp2]);
      const float w[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
      for (int r = 0; r < 4; ++r) wsacc[r][0] = fmaf(w[r], s2.x, wsacc[r][0]), wsacc[r][1] = fmaf(w[r], s2.y, wsacc[r][1]);
    }
    join_parts(wsacc);
    if (ks == 0) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        *reinterpret_cast<float2*>(&sm.vp[(4 * rg + r) * VB + cp2]) = make_float2(u[r][0] - wsacc[r][0], u[r][1] - wsacc[r][1]);
      }
    }
    __syncthreads();  // V' complete; W free
    if (wsn != nullptr) issue_w(wsn);
    cp_commit();
    if constexpr (kBulk) {
      bulk::wait(&sm.bar[1], c & 1);
    } else {
      cp_wait<2>();
    }
    __syncthreads();  // Qg, Aqk landed

    // (b) O = Qg S + Aqk V'   (Aqk is zero above the diagonal: rows i use V'_j for j ≤ i only)
    float oacc[4][2] = {};
#pragma unroll 4
    for (int kk = ks * (D / KS); kk < (ks + 1) * (D / KS); ++kk) {
      const float4 q4 = *reinterpret_cast<const float4*>(&sm.qgt[kk * C + 4 * rg]);
      const float2 s2 = *reinterpret_cast<const float2*>(&sm.s[kk * VB + cp2]);
      const float q[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
      for (int r = 0; r < 4; ++r) oacc[r][0] = fmaf(q[r], s2.x, oacc[r][0]), oacc[r][1] = fmaf(q[r], s2.y, oacc[r][1]);
    }
    const int jend = 4 * rg + 4;
    for (int j = ks; j < jend; j += KS) {
      const float4 q4 = *reinterpret_cast<const float4*>(&sm.aqkt[j * C + 4 * rg]);
      const float2 v2 = *reinterpret_cast<const float2*>(&sm.vp[j * VB + cp2]);
      const float q[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
      for (int r = 0; r < 4; ++r) oacc[r][0] = fmaf(q[r], v2.x, oacc[r][0]), oacc[r][1] = fmaf(q[r], v2.y, oacc[r][1]);
    }
    join_parts(oacc);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = 4 * rg + r;
      if (ks == 0 && i < n) {
        Tout* o = out + (row0 + i) * a.ldo + h * D + vb * VB + cp2;
        store_out(o, oacc[r][0]);
        store_out(o + 1, oacc[r][1]);
      }
    }
    __syncthreads();  // Qg, Aqk free; every read of S(c) done
    if (wsn != nullptr) issue_qa(wsn);
    cp_commit();
    if constexpr (kBulk) {
      bulk::wait(&sm.bar[2], c & 1);
    } else {
      cp_wait<2>();
    }
    __syncthreads();  // Kd, gC landed

    // (c) S = diag(gC) S + Kdᵀ V'
    float g[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) g[r] = sm.gc[4 * dg + r];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int e = 0; e < CC; ++e) sreg[r][e] *= g[r];
    }
#pragma unroll 4
    for (int j = 0; j < C; ++j) {
      const float4 k4 = *reinterpret_cast<const float4*>(&sm.kd[j * D + 4 * dg]);
      const float kk[4] = {k4.x, k4.y, k4.z, k4.w};
      float vv[CC];
      ld_vec(&sm.vp[j * VB + cc], vv);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int e = 0; e < CC; ++e) sreg[r][e] = fmaf(kk[r], vv[e], sreg[r][e]);
      }
    }
    __syncthreads();  // Kd and V' reads done before S is overwritten (S reads ended above)
#pragma unroll
    for (int r = 0; r < 4; ++r) st_vec(&sm.s[(4 * dg + r) * VB + cc], sreg[r]);
    if (wsn != nullptr) issue_kd(wsn);
    cp_commit();
  }
  cp_wait<0>();
  __syncthreads();
  // The advanced state block back to the slot.
  for (int r = 0; r < 4; ++r) {
    st_vec(state + (4 * dg + r) * D + cc, sreg[r]);
  }
}

template <int VB, bool kBulk, typename Tout>
void launch_variant(const PrefillArgs& a, cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(Smem<VB>));
  const dim3 grid(D / VB, static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch.n));
  allow_dynamic_smem(chunk_inter_kernel<VB, kBulk, Tout>, smem);
  chunk_inter_kernel<VB, kBulk, Tout><<<grid, kThreads, smem, stream>>>(a);
  K3_CUDA_CHECK_LAUNCH("chunk_inter_kernel");
}

template <int VB>
void launch(const PrefillArgs& a, bool out_bf16, bool bulk_copy, cudaStream_t stream) {
  if (bulk_copy) {
    out_bf16 ? launch_variant<VB, true, bf16>(a, stream) : launch_variant<VB, true, float>(a, stream);
  } else {
    out_bf16 ? launch_variant<VB, false, bf16>(a, stream) : launch_variant<VB, false, float>(a, stream);
  }
}

}  // namespace inter
}  // namespace k3::cuda::kda_detail
