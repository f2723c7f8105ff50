// KDA chunked prefill, part 1: everything inside one chunk of C = 64 tokens of one head, for all
// chunks in parallel (grid: chunk, head, sequence). Per chunk (spec §6.3–§6.6, as
// cpu::kda_head_chunked after the gates and L2 norms of cpu::kda_mixer):
//   q, k L2-normalised (q scaled by D^-½), g the forget gate, β = sigmoid(b), G = cumsum g
//   A[i][j]   = β_i ⟨k_i ⊙ e^{G_i−G_j}, k_j⟩   (j < i)      Aqk[i][j] = ⟨q_i ⊙ e^{G_i−G_j}, k_j⟩ (j ≤ i)
//   [W | U]   = (I + A)⁻¹ diag(β) [k ⊙ e^G | v]   by forward substitution
//   Qg = q ⊙ e^G,  Kd = k ⊙ e^{G_C − G},  gC = e^{G_C}
// written to the workspace (kda_internal.h) for the sequential inter-chunk pass.
//
// The exponentials are never ratios (G reaches −5·64 and beyond): only e^x with x ≤ 0. A / Aqk in
// 4×4 tiles of (i, j), each tile on 8 lanes that split d and meet by shuffles:
//   - the 16 diagonal tiles: e^{G_i − G_j} per element;
//   - the 120 tiles below them: with r = the tile's first row (j < r ≤ i),
//     e^{G_i − G_j} = e^{G_i − G_r} · e^{G_r − G_j}, both factors ≤ 1 (any gate: no overflow, and
//     an underflowing factor only drops a product below 1e-38), so the tile is a plain product of
//     rows scaled once per (i, d) and (j, d): 7 exps per d instead of 16.
// The solve then goes by blocks of 4 columns (each x_i sees the same operations in the same order
// as row by row; the rows below a block update independently).
// 256 threads and 110 KB of shared memory: two CTAs per SM. SIMT fp32 throughout.
#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/attention/kda/kda_internal.h"
#include "backend/cuda/attention/kda/kda_gate.cuh"
#include "backend/cuda/core/kernel_util.cuh"

namespace k3::cuda::kda_detail {
namespace {

using detail::bf16;
using detail::load1;
using detail::sigmoid;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int LDT = C + 4;  // transposed [D][LDT] tiles: float4 rows, conflict-free column access
constexpr int kDiagTiles = C / 4;                  // 4×4 tiles on the diagonal
constexpr int kTiles = (C / 4) * (C / 4 + 1) / 2;  // all 4×4 tiles of the lower triangle
constexpr int kSteps = kTiles / 4;                 // warp steps of 4 tiles
static_assert(kThreads == 2 * D, "the solve takes one column of [W | U] per thread");
static_assert(kDiagTiles == 16 && kSteps == 34 && kWarps == 8, "step_at below");

// Strictly lower A, row i at tri_off(i) padded to a multiple of 4 floats (float4 reads in the solve).
__host__ __device__ constexpr int tri_off(int i) {
  const int m = (i - 1) >> 2, rem = (i - 1) & 3;  // i = 0 gives 0
  return 8 * m * (m + 1) + 4 * (m + 1) * rem;
}

struct Smem {
  float kt[D][LDT];  // normalised k, [d][i]
  float qt[D][LDT];  // normalised, scaled q
  float gt[D][LDT];  // g, then G (cumulative within the chunk)
  float a[tri_off(C)];
  float beta[C];
};

// Tile t of the lower triangle of 4×4 tiles → (row tile, column tile): the diagonal tiles first,
// then the strictly lower ones row by row. Step s takes tiles 4s … 4s+3 (steps 0–3: diagonal).
__device__ __forceinline__ void tile_coords(int t, int& ib, int& jb) {
  if (t < kDiagTiles) {
    ib = jb = t;
  } else {
    const int u = t - kDiagTiles;
    ib = 1;
    while ((ib + 1) * ib / 2 <= u) ++ib;
    jb = u - ib * (ib - 1) / 2;
  }
}
// Warp w takes positions w, w + 8, …: the 4 dearer diagonal steps at positions 2–5 leave no warp
// with more than 5 plain steps' worth of work.
__device__ __forceinline__ int step_at(int pos) { return pos < 2 ? pos + 4 : pos < 6 ? pos - 2 : pos; }

__device__ __forceinline__ void unpack(float4 v, float (&o)[4]) { o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w; }

// acc[4x + y] += Σ_d k_i k_j e^{G_i−G_j}, acc[16 + 4x + y] += Σ_d q_i k_j e^{G_i−G_j} (i = 4ib + x,
// j = 4jb + y) over this lane's d (d ≡ lane mod 8). kDiag: ib == jb, else jb < ib.
template <bool kDiag>
__device__ __forceinline__ void tile_dot(const Smem& sm, int ib, int jb, int lane, float (&acc)[32]) {
#pragma unroll 2
  for (int d = lane & 7; d < D; d += 8) {
    float ki[4], qi[4], gi[4], kj[4], gj[4];
    unpack(*reinterpret_cast<const float4*>(&sm.kt[d][4 * ib]), ki);
    unpack(*reinterpret_cast<const float4*>(&sm.qt[d][4 * ib]), qi);
    unpack(*reinterpret_cast<const float4*>(&sm.gt[d][4 * ib]), gi);
    unpack(*reinterpret_cast<const float4*>(&sm.kt[d][4 * jb]), kj);
    unpack(*reinterpret_cast<const float4*>(&sm.gt[d][4 * jb]), gj);
    if constexpr (kDiag) {
#pragma unroll
      for (int x = 0; x < 4; ++x) {
#pragma unroll
        for (int y = 0; y < 4; ++y) {
          // G_i − G_j ≤ 0 for j ≤ i; the clamp only tames the discarded j > i entries.
          const float ek = __expf(fminf(gi[x] - gj[y], 0.0f)) * kj[y];
          acc[4 * x + y] = fmaf(ki[x], ek, acc[4 * x + y]);
          acc[16 + 4 * x + y] = fmaf(qi[x], ek, acc[16 + 4 * x + y]);
        }
      }
    } else {
      const float gr = gi[0];  // G_r, r = 4·ib
#pragma unroll
      for (int x = 1; x < 4; ++x) {
        const float e = __expf(gi[x] - gr);
        ki[x] *= e, qi[x] *= e;
      }
#pragma unroll
      for (int y = 0; y < 4; ++y) kj[y] *= __expf(gr - gj[y]);
#pragma unroll
      for (int x = 0; x < 4; ++x) {
#pragma unroll
        for (int y = 0; y < 4; ++y) {
          acc[4 * x + y] = fmaf(ki[x], kj[y], acc[4 * x + y]);
          acc[16 + 4 * x + y] = fmaf(qi[x], kj[y], acc[16 + 4 * x + y]);
        }
      }
    }
  }
}

// One step of a transposing butterfly over lanes (lane ^ o): each lane keeps the half of v[0, N)
// its lane bit selects, summed with the partner's copy of that half, in v[0, N/2).
template <int N>
__device__ __forceinline__ void halve(float (&v)[32], bool upper, int o) {
#pragma unroll
  for (int e = 0; e < N / 2; ++e) {
    const float lo = v[e], hi = v[e + N / 2];
    v[e] = (upper ? hi : lo) + __shfl_xor_sync(0xffffffffu, upper ? lo : hi, o);
  }
}

template <typename Tin>
__global__ void __launch_bounds__(kThreads, 2) chunk_intra_kernel(PrefillArgs a) {
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

  // 1. Gates, β and the L2 norms: a warp takes 4 tokens, lane → token lane & 3, channels
  //    (lane >> 2) + 8m (the transposed stores hit 32 distinct banks). Rows ≥ n are zero (g = 0 keeps
  //    G_C = G_{n−1}; k = q = β = 0 keep them out of every sum).
  {
    constexpr int kPer = D / 8;
    const int dl = lane >> 2;
    for (int i = 4 * warp + (lane & 3); i < C; i += 4 * kWarps) {
      const bool live = i < n;
      const int64_t r = row0 + i;
      float qv[kPer], kv[kPer], fv[kPer];
      float ssq = 0.0f, ssk = 0.0f;
#pragma unroll
      for (int m = 0; m < kPer; ++m) {
        const int64_t col = h * D + dl + 8 * m;
        qv[m] = live ? load1(q + r * a.ldq + col) : 0.0f;
        kv[m] = live ? load1(k + r * a.ldk + col) : 0.0f;
        fv[m] = live ? load1(f + r * a.ldf + col) : 0.0f;
        ssq += qv[m] * qv[m], ssk += kv[m] * kv[m];
      }
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) {
        ssq += __shfl_xor_sync(0xffffffffu, ssq, o);
        ssk += __shfl_xor_sync(0xffffffffu, ssk, o);
      }
      const float rq = a.q_scale / sqrtf(ssq + 1e-6f), rk = 1.0f / sqrtf(ssk + 1e-6f);
#pragma unroll
      for (int m = 0; m < kPer; ++m) {
        const int d = dl + 8 * m;
        sm.kt[d][i] = kv[m] * rk;
        sm.qt[d][i] = qv[m] * rq;
        sm.gt[d][i] = live ? detail::kda_log_decay(a.gate, ea, fv[m] + a.gate.dt_bias[h * D + d]) : 0.0f;
      }
      if (dl == 0) sm.beta[i] = live ? sigmoid(load1(b + r * a.ldb + h)) : 0.0f;
    }
  }
  __syncthreads();

  // 2. G = cumulative sum of g over the chunk, per channel (the CPU's order).
  if (tid < D) {
    float acc = 0.0f;
    for (int i = 0; i < C; i += 4) {
      float4* p = reinterpret_cast<float4*>(&sm.gt[tid][i]);
      float4 g4 = *p;
      acc += g4.x, g4.x = acc;
      acc += g4.y, g4.y = acc;
      acc += g4.z, g4.z = acc;
      acc += g4.w, g4.w = acc;
      *p = g4;
    }
  }
  __syncthreads();

  // 3. Qg (transposed), Kd, gC: elementwise, straight to the workspace; Aqkt zero above the
  //    diagonal tiles (the tiles write the rest).
  for (int idx = tid; idx < D * C / 4; idx += kThreads) {
    const int d = idx / (C / 4), i = 4 * (idx % (C / 4));
    const float4 q4 = *reinterpret_cast<const float4*>(&sm.qt[d][i]);
    const float4 g4 = *reinterpret_cast<const float4*>(&sm.gt[d][i]);
    *reinterpret_cast<float4*>(ws + kOffQgt + d * C + i) =
        make_float4(q4.x * expf(g4.x), q4.y * expf(g4.y), q4.z * expf(g4.z), q4.w * expf(g4.w));
  }
  for (int idx = tid; idx < D * C / 4; idx += kThreads) {
    const int d = idx % D, i = 4 * (idx / D);
    float k4[4], g4[4];
    unpack(*reinterpret_cast<const float4*>(&sm.kt[d][i]), k4);
    unpack(*reinterpret_cast<const float4*>(&sm.gt[d][i]), g4);
    const float gc = sm.gt[d][C - 1];
#pragma unroll
    for (int e = 0; e < 4; ++e) ws[kOffKd + (i + e) * D + d] = k4[e] * expf(gc - g4[e]);
  }
  if (tid < D) ws[kOffGc + tid] = expf(sm.gt[tid][C - 1]);
  for (int idx = tid; idx < C * C; idx += kThreads) {
    const int j = idx / C, i = idx % C;
    if (j / 4 > i / 4) ws[kOffAqkt + idx] = 0.0f;
  }

  // 4. A and Aqk: a warp step takes 4 tiles (lane >> 3), 8 lanes per tile over d; the 32 sums of a
  //    tile meet in a 3-step butterfly that leaves lane p with row p & 3 of A (p < 4) or Aqk.
  for (int pos = warp; pos < kSteps; pos += kWarps) {
    const int step = step_at(pos);
    int ib, jb;
    tile_coords(4 * step + (lane >> 3), ib, jb);
    float acc[32] = {};
    if (step < kDiagTiles / 4) {
      tile_dot<true>(sm, ib, jb, lane, acc);
    } else {
      tile_dot<false>(sm, ib, jb, lane, acc);
    }
    halve<32>(acc, lane & 4, 4);
    halve<16>(acc, lane & 2, 2);
    halve<8>(acc, lane & 1, 1);
    const int i = 4 * ib + (lane & 3);
    if ((lane & 4) == 0) {
#pragma unroll
      for (int y = 0; y < 4; ++y) {
        const int j = 4 * jb + y;
        if (j < i) sm.a[tri_off(i) + j] = sm.beta[i] * acc[y];
      }
    } else {
#pragma unroll
      for (int y = 0; y < 4; ++y) {
        const int j = 4 * jb + y;
        ws[kOffAqkt + j * C + i] = j <= i ? acc[y] : 0.0f;
      }
    }
  }
  __syncthreads();

  // 5. Forward substitution, one column of [W | U] per thread, the column in registers:
  //    x_i = β_i [k_i e^{G_i} | v_i] − Σ_{j<i} A[i][j] x_j.
  const bool is_w = tid < D;
  const int col = tid % D;
  float x[C];
  if (is_w) {
#pragma unroll
    for (int i = 0; i < C; i += 4) {
      float k4[4], g4[4];
      unpack(*reinterpret_cast<const float4*>(&sm.kt[col][i]), k4);
      unpack(*reinterpret_cast<const float4*>(&sm.gt[col][i]), g4);
#pragma unroll
      for (int e = 0; e < 4; ++e) x[i + e] = sm.beta[i + e] * k4[e] * expf(g4[e]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < C; ++i) x[i] = i < n ? sm.beta[i] * load1(v + (row0 + i) * a.ldv + h * D + col) : 0.0f;
  }
#pragma unroll
  for (int j0 = 0; j0 < C; j0 += 4) {
#pragma unroll
    for (int i = j0 + 1; i < j0 + 4; ++i) {
#pragma unroll
      for (int j = j0; j < i; ++j) x[i] -= sm.a[tri_off(i) + j] * x[j];
    }
#pragma unroll
    for (int i = j0 + 4; i < C; ++i) {
      const float4 a4 = *reinterpret_cast<const float4*>(sm.a + tri_off(i) + j0);
      x[i] -= a4.x * x[j0];
      x[i] -= a4.y * x[j0 + 1];
      x[i] -= a4.z * x[j0 + 2];
      x[i] -= a4.w * x[j0 + 3];
    }
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

template <typename Tin>
void launch(const PrefillArgs& a, cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(Smem));
  allow_dynamic_smem(chunk_intra_kernel<Tin>, smem);
  K3_CUDA_CHECK(cudaFuncSetAttribute(chunk_intra_kernel<Tin>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));  // room for two CTAs per SM
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
