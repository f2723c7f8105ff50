// MLA prefill attention (spec §5, expanded form; CPU reference attend_expanded in
// backend/cpu/mla.cpp), flash-attention style: one CTA per (64-query tile, head, sequence), 4 warps
// of 16 query rows; 64-key tiles of [k_nope | k_pe] (192) and v (128) double-buffered through
// cp.async; S = Q Kᵀ and O += P V on mma.sync m16n8k16 (bf16 operands through ldmatrix, fp32 accumulation); online
// softmax in fp32 registers (exp2 with the scale folded in), P rounded to bf16 as the second
// product's operand, and the row sums taken over those rounded values so that O / l is a proper
// convex combination. The output gate sigmoid(g) is applied in the epilogue.
#include <string>

#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/attention/mla/mla_util.cuh"

namespace k3::cuda {
namespace {

using namespace mla_detail;
constexpr int kThreads = 128;
constexpr int BM = 64, BN = 64;
constexpr int LDK = kMlaQk + 8;  // padded rows: 400 bytes, conflict-free fragment loads
constexpr int LDV = kMlaV + 8;   // 272 bytes
constexpr int kKSteps = kMlaQk / 16;  // 12
constexpr int kNTilesV = kMlaV / 8;   // 16

struct Smem {
  bf16 q[BM][LDK];
  bf16 k[2][BN][LDK];
  bf16 v[2][BN][LDV];
};

struct PrefillArgs {
  const int32_t* cu_q;
  const int32_t* cu_kv;
  int heads;
  const bf16* q; int64_t ldq;
  const bf16* kv; int64_t ldkv;
  const bf16* kpe; int64_t ldpe;
  const void* gate; int64_t ldg;
  float scale_log2;
  void* out; int64_t ldo;
};

template <typename Tg, typename Tout, bool kGate>
__global__ void __launch_bounds__(kThreads) mla_prefill_kernel(PrefillArgs a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int qt = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
  const int q0 = a.cu_q[s], qlen = a.cu_q[s + 1] - q0;
  const int kv0 = a.cu_kv[s], kvlen = a.cu_kv[s + 1] - kv0;
  if (qt * BM >= qlen) return;
  const int off = kvlen - qlen;
  const int rows_end = min(qlen, qt * BM + BM);
  const int ntiles = (off + rows_end - 1) / BN + 1;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;

  // Q tile: 64 rows × 24 chunks of 16 bytes.
  for (int idx = tid; idx < BM * 24; idx += kThreads) {
    const int r = idx / 24, ch = idx % 24;
    const int i = qt * BM + r;
    const bool ok = i < qlen;
    const bf16* src = ok ? a.q + static_cast<int64_t>(q0 + i) * a.ldq + h * kMlaQk + ch * 8 : a.q;
    cp_async16(&sm.q[r][ch * 8], src, ok ? 16 : 0);
  }
  auto load_tile = [&](int j, int buf) {
    for (int idx = tid; idx < BN * 40; idx += kThreads) {
      const int r = idx / 40, ch = idx % 40;
      const int key = j * BN + r;
      const bool ok = key < kvlen;
      const int64_t row = kv0 + key;
      if (ch < 16) {
        const bf16* src = ok ? a.kv + row * a.ldkv + h * 256 + ch * 8 : a.kv;
        cp_async16(&sm.k[buf][r][ch * 8], src, ok ? 16 : 0);
      } else if (ch < 24) {
        const bf16* src = ok ? a.kpe + row * a.ldpe + (ch - 16) * 8 : a.kpe;
        cp_async16(&sm.k[buf][r][kMlaNope + (ch - 16) * 8], src, ok ? 16 : 0);
      } else {
        const bf16* src = ok ? a.kv + row * a.ldkv + h * 256 + kMlaNope + (ch - 24) * 8 : a.kv;
        cp_async16(&sm.v[buf][r][(ch - 24) * 8], src, ok ? 16 : 0);
      }
    }
  };
  load_tile(0, 0);
  cp_commit();

  uint32_t qa[kKSteps][4];
  float o[kNTilesV][4];
#pragma unroll
  for (int nt = 0; nt < kNTilesV; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8 of this warp
  const int i0 = qt * BM + warp * 16 + g;                      // local query index of row g

  for (int j = 0; j < ntiles; ++j) {
    const int buf = j & 1;
    if (j + 1 < ntiles) load_tile(j + 1, buf ^ 1);
    cp_commit();
    cp_wait<1>();
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        load_a_ldsm(qa[kk], &sm.q[0][0], LDK, warp * 16, kk * 16, lane);
      }
    }
    float sc[BN / 8][4];
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; nt += 2) {
        uint32_t bb[4];
        load_b_nk_ldsm(bb, &sm.k[buf][0][0], LDK, nt * 8, kk * 16, lane);
        mma_bf16(sc[nt], qa[kk], bb[0], bb[1]);
        mma_bf16(sc[nt + 1], qa[kk], bb[2], bb[3]);
      }
    }
    // Mask (causal: key ≤ off + i), scale, row max.
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j * BN + nt * 8 + 2 * t + (e & 1);
        const int i = i0 + (e >> 1) * 8;
        const float x = key <= off + i ? sc[nt][e] * a.scale_log2 : -INFINITY;
        sc[nt][e] = x;
        if (e < 2) {
          mx0 = fmaxf(mx0, x);
        } else {
          mx1 = fmaxf(mx1, x);
        }
      }
    }
#pragma unroll
    for (int sh = 1; sh < 4; sh <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xFFFFFFFFu, mx0, sh));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xFFFFFFFFu, mx1, sh));
    }
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);  // finite: key 0 is visible to every row
    const float al0 = exp2f(m0 - n0), al1 = exp2f(m1 - n1);
    m0 = n0, m1 = n1;
    float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = bf16_round(exp2f(sc[nt][e] - (e < 2 ? n0 : n1)));
        sc[nt][e] = p;
        if (e < 2) {
          ps0 += p;
        } else {
          ps1 += p;
        }
      }
    }
    l0 = l0 * al0 + ps0, l1 = l1 * al1 + ps1;  // per-thread partial sums; the quad adds them at the end
#pragma unroll
    for (int nt = 0; nt < kNTilesV; ++nt) o[nt][0] *= al0, o[nt][1] *= al0, o[nt][2] *= al1, o[nt][3] *= al1;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t pa[4] = {pack_bf16(sc[2 * kk][0], sc[2 * kk][1]), pack_bf16(sc[2 * kk][2], sc[2 * kk][3]),
                              pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                              pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
      for (int nt = 0; nt < kNTilesV; nt += 2) {
        uint32_t bb[4];
        load_b_kn_ldsm(bb, &sm.v[buf][0][0], LDV, kk * 16, nt * 8, lane);
        mma_bf16(o[nt], pa, bb[0], bb[1]);
        mma_bf16(o[nt + 1], pa, bb[2], bb[3]);
      }
    }
    __syncthreads();  // this buffer is refilled by the next iteration's prefetch
  }
  cp_wait<0>();

#pragma unroll
  for (int sh = 1; sh < 4; sh <<= 1) {
    l0 += __shfl_xor_sync(0xFFFFFFFFu, l0, sh);
    l1 += __shfl_xor_sync(0xFFFFFFFFu, l1, sh);
  }
  const float r0 = 1.0f / l0, r1 = 1.0f / l1;
  Tout* out = static_cast<Tout*>(a.out);
  const Tg* gate = static_cast<const Tg*>(a.gate);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = i0 + half * 8;
    if (i >= qlen) continue;
    const int64_t row = q0 + i;
    const float r = half == 0 ? r0 : r1;
#pragma unroll
    for (int nt = 0; nt < kNTilesV; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = h * kMlaV + nt * 8 + 2 * t + e;
        float val = o[nt][half * 2 + e] * r;
        if constexpr (kGate) val *= 1.0f / (1.0f + expf(-load_val(gate + row * a.ldg + col)));
        store_val(out + row * a.ldo + col, val);
      }
    }
  }
}

template <typename Tg, typename Tout, bool kGate>
void launch(const PrefillArgs& a, dim3 grid, cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(Smem));
  allow_dynamic_smem(mla_prefill_kernel<Tg, Tout, kGate>, smem);
  mla_prefill_kernel<Tg, Tout, kGate><<<grid, kThreads, smem, stream>>>(a);
  K3_CUDA_CHECK_LAUNCH("mla_prefill_kernel");
}

bool aligned16(const DeviceTensor& t) {
  return (reinterpret_cast<uintptr_t>(t.data) % 16) == 0 && (t.ld * dtype_size(t.dtype)) % 16 == 0;
}

}  // namespace

void mla_prefill_attention(const int32_t* cu_q, const int32_t* cu_kv, int n, int max_q_len, const DeviceTensor& q,
                           const DeviceTensor& kv, const DeviceTensor& k_pe, const DeviceTensor& gate, float scale,
                           const DeviceTensor& out, cudaStream_t stream) {
  const int64_t H = q.cols / kMlaQk;
  if (q.cols % kMlaQk != 0 || H == 0) throw Error("mla_prefill_attention: q must be [T, H·192], got " + q.describe());
  expect_dtype(q, DType::kBF16, "mla_prefill_attention q");
  expect_dtype(kv, DType::kBF16, "mla_prefill_attention kv");
  expect_dtype(k_pe, DType::kBF16, "mla_prefill_attention k_pe");
  expect_shape(kv, kv.rows, H * (kMlaNope + kMlaV), "mla_prefill_attention kv");
  expect_shape(k_pe, kv.rows, kMlaRope, "mla_prefill_attention k_pe");
  expect_shape(out, q.rows, H * kMlaV, "mla_prefill_attention out");
  const bool has_gate = gate.data != nullptr;
  if (has_gate) expect_shape(gate, q.rows, H * kMlaV, "mla_prefill_attention gate");
  for (const DeviceTensor* x : {&q, &kv, &k_pe}) {
    if (!aligned16(*x)) throw Error("mla_prefill_attention: needs 16-byte aligned rows, got " + x->describe());
  }
  const bool ob = out.dtype == DType::kBF16, gb = gate.dtype == DType::kBF16;
  if (!ob && out.dtype != DType::kF32) throw Error("mla_prefill_attention: f32 or bf16 out, got " + out.describe());
  if (has_gate && !gb && gate.dtype != DType::kF32) throw Error("mla_prefill_attention: f32 or bf16 gate");
  if (n == 0 || q.rows == 0) return;
  const PrefillArgs a{cu_q, cu_kv, static_cast<int>(H), q.as<const bf16>(), q.ld, kv.as<const bf16>(), kv.ld,
                      k_pe.as<const bf16>(), k_pe.ld, gate.data, gate.ld, scale * 1.4426950408889634f, out.data,
                      out.ld};
  const dim3 grid(static_cast<unsigned>((max_q_len + BM - 1) / BM), static_cast<unsigned>(H), static_cast<unsigned>(n));
  if (!has_gate) {
    if (ob) {
      launch<float, bf16, false>(a, grid, stream);
    } else {
      launch<float, float, false>(a, grid, stream);
    }
  } else if (gb) {
    if (ob) {
      launch<bf16, bf16, true>(a, grid, stream);
    } else {
      launch<bf16, float, true>(a, grid, stream);
    }
  } else {
    if (ob) {
      launch<float, bf16, true>(a, grid, stream);
    } else {
      launch<float, float, true>(a, grid, stream);
    }
  }
}

}  // namespace k3::cuda
