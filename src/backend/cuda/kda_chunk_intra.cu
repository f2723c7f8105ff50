// KDA chunked prefill, part 1: everything inside one chunk of C = 64 tokens of one head, for all
// chunks in parallel (grid: chunk, head, sequence). Per chunk (spec §6.3–§6.6, as
// cpu::kda_head_chunked after the gates and L2 norms of cpu::kda_mixer):
//   q, k L2-normalised (q scaled by D^-½), g the forget gate, β = sigmoid(b), G = cumsum g
//   A[i][j]   = β_i ⟨k_i ⊙ e^{G_i−G_j}, k_j⟩   (j < i)      Aqk[i][j] = ⟨q_i ⊙ e^{G_i−G_j}, k_j⟩ (j ≤ i)
//   [W | U]   = (I + A)⁻¹ diag(β) [k ⊙ e^G | v]   by forward substitution
//   Qg = q ⊙ e^G,  Kd = k ⊙ e^{G_C − G},  gC = e^{G_C}
// written to the workspace (kda_internal.h) for the sequential inter-chunk pass.
//
// The exponentials are always of differences G_i − G_j ≤ 0 (never ratios; G reaches −5·64 and
// beyond). The A/Aqk phase dominates: 64·65/2·128 exps per chunk and head, one per (i, j, d) shared
// by A and Aqk; each thread takes a 4×4 block of (i, j) over half of d, 272 items on 9 warps.
// SIMT fp32 throughout (the exps do not factor into a plain matrix product).
#include "backend/cuda/check.h"
#include "backend/cuda/kda_internal.h"
#include "backend/cuda/kda_gate.cuh"
#include "backend/cuda/kernel_util.cuh"

namespace k3::cuda::kda_detail {
namespace {

using detail::bf16;
using detail::load1;
using detail::load4;
using detail::sigmoid;
constexpr int kThreads = 288;
constexpr int LDT = C + 4;       // transposed [D][LDT] tiles: rows 16-byte aligned for float4
constexpr int kBlocks = 16 * 17 / 2;  // 4×4 blocks of the lower triangle (incl. diagonal)

struct Smem {
  float kt[D][LDT];   // normalised k, [d][i]
  float qt[D][LDT];   // normalised, scaled q
  float gt[D][LDT];   // g, then G (cumulative within the chunk)
  float A[C][C];      // β_i ⟨…⟩, strictly lower part used
  float Aqk[C][C + 1];
  float beta[C];
};


template <typename Tin>
__global__ void __launch_bounds__(kThreads, 1) chunk_intra_kernel(PrefillArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int c = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
  const int seq0 = a.batch.cu_seqlens[s], len = a.batch.cu_seqlens[s + 1] - seq0;
  if (c * C >= len) return;
  const int n = min(C, len - c * C);
  const int64_t row0 = seq0 + static_cast<int64_t>(c) * C;
  const int64_t slot = seq0 / C + s + c;
  float* ws = a.ws + (slot * a.heads + h) * static_cast<int64_t>(kFloatsPerChunkHead);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const Tin* q = static_cast<const Tin*>(a.q);
  const Tin* k = static_cast<const Tin*>(a.k);
  const Tin* v = static_cast<const Tin*>(a.v);
  const Tin* f = static_cast<const Tin*>(a.f);
  const Tin* b = static_cast<const Tin*>(a.b);
  const float ea = expf(a.gate.a_log[h]);

  // 1. Gates, β and the L2 norms, one warp per token (lane: 4 channels); rows ≥ n are zero (g = 0
  //    keeps G_C = G_{n−1}; k = q = β = 0 keeps them out of every sum).
  for (int i = warp; i < C; i += kThreads / 32) {
    const int d0 = lane * 4;
    float q4[4] = {0, 0, 0, 0}, k4[4] = {0, 0, 0, 0}, g4[4] = {0, 0, 0, 0};
    float beta = 0.0f;
    if (i < n) {
      const int64_t r = row0 + i;
      load4(q + r * a.ldq + h * D + d0, q4);
      load4(k + r * a.ldk + h * D + d0, k4);
      float f4[4];
      load4(f + r * a.ldf + h * D + d0, f4);
      float ssq = 0.0f, ssk = 0.0f;
#pragma unroll
      for (int e = 0; e < 4; ++e) ssq += q4[e] * q4[e], ssk += k4[e] * k4[e];
      ssq = detail::warp_sum(ssq);
      ssk = detail::warp_sum(ssk);
      const float rq = a.q_scale / sqrtf(ssq + 1e-6f), rk = 1.0f / sqrtf(ssk + 1e-6f);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        q4[e] *= rq, k4[e] *= rk;
        const float z = f4[e] + a.gate.dt_bias[h * D + d0 + e];
        g4[e] = detail::kda_log_decay(a.gate, ea, z);
      }
      beta = sigmoid(load1(b + r * a.ldb + h));
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) sm.kt[d0 + e][i] = k4[e], sm.qt[d0 + e][i] = q4[e], sm.gt[d0 + e][i] = g4[e];
    if (lane == 0) sm.beta[i] = beta;
  }
  for (int idx = tid; idx < C * C; idx += kThreads) (&sm.A[0][0])[idx] = 0.0f;
  for (int idx = tid; idx < C * (C + 1); idx += kThreads) (&sm.Aqk[0][0])[idx] = 0.0f;
  __syncthreads();

  // 2. G = cumulative sum of g over the chunk, per channel (the CPU's order).
  if (tid < D) {
    float acc = 0.0f;
    for (int i = 0; i < C; ++i) {
      acc += sm.gt[tid][i];
      sm.gt[tid][i] = acc;
    }
  }
  __syncthreads();

  // 3. Qg (transposed), Kd, gC: elementwise, straight to the workspace.
  for (int idx = tid; idx < D * C; idx += kThreads) {
    const int d = idx / C, i = idx % C;
    ws[kOffQgt + idx] = sm.qt[d][i] * expf(sm.gt[d][i]);
  }
  for (int idx = tid; idx < C * D; idx += kThreads) {
    const int i = idx / D, d = idx % D;
    ws[kOffKd + idx] = sm.kt[d][i] * expf(sm.gt[d][C - 1] - sm.gt[d][i]);
  }
  if (tid < D) ws[kOffGc + tid] = expf(sm.gt[tid][C - 1]);

  // 4. A and Aqk: item = (4×4 block of the lower triangle, half of d); partial sums meet in shared
  //    memory by atomicAdd onto zero (two addends: the result does not depend on their order).
  for (int it = tid; it < 2 * kBlocks; it += kThreads) {
    const int half = it >= kBlocks ? 1 : 0;
    const int blk = it - half * kBlocks;
    int ib = 0;
    while ((ib + 1) * (ib + 2) / 2 <= blk) ++ib;
    const int jb = blk - ib * (ib + 1) / 2;
    float acc[4][4], accq[4][4];
#pragma unroll
    for (int x = 0; x < 4; ++x) {
#pragma unroll
      for (int y = 0; y < 4; ++y) acc[x][y] = 0.0f, accq[x][y] = 0.0f;
    }
    const int dlo = half * (D / 2);
#pragma unroll 2
    for (int d = dlo; d < dlo + D / 2; ++d) {
      const float4 kI = *reinterpret_cast<const float4*>(&sm.kt[d][4 * ib]);
      const float4 qI = *reinterpret_cast<const float4*>(&sm.qt[d][4 * ib]);
      const float4 gI = *reinterpret_cast<const float4*>(&sm.gt[d][4 * ib]);
      const float4 kJ = *reinterpret_cast<const float4*>(&sm.kt[d][4 * jb]);
      const float4 gJ = *reinterpret_cast<const float4*>(&sm.gt[d][4 * jb]);
      const float ki[4] = {kI.x, kI.y, kI.z, kI.w}, qi[4] = {qI.x, qI.y, qI.z, qI.w};
      const float gi[4] = {gI.x, gI.y, gI.z, gI.w}, kj[4] = {kJ.x, kJ.y, kJ.z, kJ.w};
      const float gj[4] = {gJ.x, gJ.y, gJ.z, gJ.w};
#pragma unroll
      for (int x = 0; x < 4; ++x) {
#pragma unroll
        for (int y = 0; y < 4; ++y) {
          // G_i − G_j ≤ 0 for j ≤ i; the clamp only tames the discarded j > i entries of diagonal blocks.
          const float ek = __expf(fminf(gi[x] - gj[y], 0.0f)) * kj[y];
          acc[x][y] = fmaf(ki[x], ek, acc[x][y]);
          accq[x][y] = fmaf(qi[x], ek, accq[x][y]);
        }
      }
    }
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int i = 4 * ib + x;
#pragma unroll
      for (int y = 0; y < 4; ++y) {
        const int j = 4 * jb + y;
        if (j < i) atomicAdd(&sm.A[i][j], sm.beta[i] * acc[x][y]);
        if (j <= i) atomicAdd(&sm.Aqk[i][j], accq[x][y]);
      }
    }
  }
  __syncthreads();

  // 5. Forward substitution, one column of [W | U] per thread, the column in registers:
  //    x_i = β_i [k_i e^{G_i} | v_i] − Σ_{j<i} A[i][j] x_j.
  if (tid < 2 * D) {
    const bool is_w = tid < D;
    const int col = is_w ? tid : tid - D;
    float x[C];
#pragma unroll
    for (int i = 0; i < C; ++i) {
      float r = 0.0f;
      if (i < n) {
        r = is_w ? sm.beta[i] * sm.kt[col][i] * expf(sm.gt[col][i])
                 : sm.beta[i] * load1(v + (row0 + i) * a.ldv + h * D + col);
      }
      x[i] = r;
    }
#pragma unroll
    for (int i = 1; i < C; ++i) {
      float acc = x[i];
#pragma unroll
      for (int j = 0; j + 4 <= i; j += 4) {
        const float4 a4 = *reinterpret_cast<const float4*>(&sm.A[i][j]);
        acc -= a4.x * x[j];
        acc -= a4.y * x[j + 1];
        acc -= a4.z * x[j + 2];
        acc -= a4.w * x[j + 3];
      }
#pragma unroll
      for (int j = i & ~3; j < i; ++j) acc -= sm.A[i][j] * x[j];
      x[i] = acc;
    }
    if (is_w) {
      float4* wt = reinterpret_cast<float4*>(ws + kOffWt + col * C);
#pragma unroll
      for (int i = 0; i < C; i += 4) wt[i / 4] = make_float4(x[i], x[i + 1], x[i + 2], x[i + 3]);
    } else {
#pragma unroll
      for (int i = 0; i < C; ++i) ws[kOffU + i * D + col] = x[i];
    }
  }
  // 6. Aqk transposed, zero above the diagonal.
  for (int idx = tid; idx < C * C; idx += kThreads) {
    const int j = idx / C, i = idx % C;
    ws[kOffAqkt + idx] = j <= i ? sm.Aqk[i][j] : 0.0f;
  }
}

template <typename Tin>
void launch(const PrefillArgs& a, cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(Smem));
  K3_CUDA_CHECK(cudaFuncSetAttribute(chunk_intra_kernel<Tin>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((a.batch.max_len + C - 1) / C), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.batch.n));
  chunk_intra_kernel<Tin><<<grid, kThreads, smem, stream>>>(a);
  K3_CUDA_CHECK_LAUNCH("chunk_intra_kernel");
}

}  // namespace

void launch_chunk_intra(const PrefillArgs& a, bool in_bf16, cudaStream_t stream) {
  if (in_bf16) {
    launch<bf16>(a, stream);
  } else {
    launch<float>(a, stream);
  }
}

}  // namespace k3::cuda::kda_detail
