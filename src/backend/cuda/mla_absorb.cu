// The two per-head products around MLA decode attention (spec §5, absorbed form; CPU reference
// attend_absorbed in backend/cpu/mla.cpp):
//   mla_absorb_q:   q_abs[b][h] = [W_UK[h]ᵀ q_nope[b][h] | q_pe[b][h]]        (bf16 out)
//   mla_unabsorb_o: out[b][h·128 + e] = (W_UV[h] o_lat[b][h])[e] · sigmoid(g)  (output gate fused)
// Both are batched GEMV-like (B ≤ a few hundred tokens) and read each head's 128 × 512 bf16 matrix
// once per CTA: absorb keeps 8 sequences' q_nope in shared memory and each thread two latent
// columns; unabsorb keeps one W_UV row per warp in registers and loops over the sequences.
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/mla.h"
#include "backend/cuda/mla_util.cuh"

namespace k3::cuda {
namespace {

using namespace mla_detail;
constexpr int kAbsorbBatch = 8;

template <typename Tq>
__global__ void __launch_bounds__(256) absorb_q_kernel(const Tq* __restrict__ q, int64_t ldq, const bf16* __restrict__ w,
                                                       int64_t ldw, bf16* __restrict__ out, int64_t ldo, int batch) {
  __shared__ float qs[kAbsorbBatch][kMlaNope];
  const int h = blockIdx.x, b0 = blockIdx.y * kAbsorbBatch, tid = threadIdx.x;
  const int nb = min(kAbsorbBatch, batch - b0);
  for (int idx = tid; idx < kAbsorbBatch * kMlaNope; idx += 256) {
    const int bb = idx / kMlaNope, e = idx % kMlaNope;
    qs[bb][e] = bb < nb ? load_val(q + static_cast<int64_t>(b0 + bb) * ldq + h * kMlaQk + e) : 0.0f;
  }
  __syncthreads();
  const int c = tid * 2;
  float acc[kAbsorbBatch][2] = {};
  const bf16* wh = w + static_cast<int64_t>(h) * kMlaNope * ldw + c;
#pragma unroll 4
  for (int e = 0; e < kMlaNope; ++e) {
    const __nv_bfloat162 w2 = *reinterpret_cast<const __nv_bfloat162*>(wh + e * ldw);
    const float w0 = __low2float(w2), w1 = __high2float(w2);
#pragma unroll
    for (int bb = 0; bb < kAbsorbBatch; ++bb) {
      acc[bb][0] = fmaf(w0, qs[bb][e], acc[bb][0]);
      acc[bb][1] = fmaf(w1, qs[bb][e], acc[bb][1]);
    }
  }
  for (int bb = 0; bb < nb; ++bb) {
    bf16* o = out + static_cast<int64_t>(b0 + bb) * ldo + static_cast<int64_t>(h) * kMlaRow;
    *reinterpret_cast<uint32_t*>(o + c) = pack_bf16(acc[bb][0], acc[bb][1]);
    if (tid < kMlaRope) o[kMlaRank + tid] = __float2bfloat16_rn(load_val(q + static_cast<int64_t>(b0 + bb) * ldq + h * kMlaQk + kMlaNope + tid));
  }
}

template <typename Tg, typename Tout, bool kGate>
__global__ void __launch_bounds__(256) unabsorb_o_kernel(const float* __restrict__ o_lat, int64_t ldl,
                                                         const bf16* __restrict__ w, int64_t ldw,
                                                         const Tg* __restrict__ gate, int64_t ldg,
                                                         Tout* __restrict__ out, int64_t ldo, int batch) {
  const int h = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int e = blockIdx.y * 8 + warp;
  const int c0 = lane * 16;
  float wr[16];
  detail::load8(w + (static_cast<int64_t>(h) * kMlaV + e) * ldw + c0, *reinterpret_cast<float(*)[8]>(wr));
  detail::load8(w + (static_cast<int64_t>(h) * kMlaV + e) * ldw + c0 + 8, *reinterpret_cast<float(*)[8]>(wr + 8));
  for (int b = 0; b < batch; ++b) {
    const float* ol = o_lat + static_cast<int64_t>(b) * ldl + static_cast<int64_t>(h) * kMlaRank + c0;
    float x[8], y[8];
    detail::load8(ol, x);
    detail::load8(ol + 8, y);
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc = fmaf(wr[i], x[i], acc);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc = fmaf(wr[8 + i], y[i], acc);
    acc = detail::warp_sum(acc);
    if (lane == 0) {
      const int col = h * kMlaV + e;
      if constexpr (kGate) acc *= 1.0f / (1.0f + expf(-load_val(gate + static_cast<int64_t>(b) * ldg + col)));
      store_val(out + static_cast<int64_t>(b) * ldo + col, acc);
    }
  }
}

}  // namespace

void mla_absorb_q(const DeviceTensor& q, const DeviceTensor& w_uk, const DeviceTensor& q_abs, cudaStream_t stream) {
  const int64_t H = q.cols / kMlaQk, B = q.rows;
  if (q.cols % kMlaQk != 0 || H == 0) throw Error("mla_absorb_q: q must be [B, H·192], got " + q.describe());
  expect_dtype(w_uk, DType::kBF16, "mla_absorb_q w_uk");
  expect_shape(w_uk, H * kMlaNope, kMlaRank, "mla_absorb_q w_uk");
  expect_dtype(q_abs, DType::kBF16, "mla_absorb_q q_abs");
  expect_shape(q_abs, B, H * kMlaRow, "mla_absorb_q q_abs");
  if ((w_uk.ld % 2) != 0 || (q_abs.ld % 2) != 0 || reinterpret_cast<uintptr_t>(w_uk.data) % 4 != 0 ||
      reinterpret_cast<uintptr_t>(q_abs.data) % 4 != 0) {
    throw Error("mla_absorb_q: needs 4-byte aligned rows");
  }
  if (B == 0) return;
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((B + kAbsorbBatch - 1) / kAbsorbBatch));
  if (q.dtype == DType::kBF16) {
    absorb_q_kernel<bf16><<<grid, 256, 0, stream>>>(q.as<const bf16>(), q.ld, w_uk.as<const bf16>(), w_uk.ld,
                                                    q_abs.as<bf16>(), q_abs.ld, static_cast<int>(B));
  } else if (q.dtype == DType::kF32) {
    absorb_q_kernel<float><<<grid, 256, 0, stream>>>(q.as<const float>(), q.ld, w_uk.as<const bf16>(), w_uk.ld,
                                                     q_abs.as<bf16>(), q_abs.ld, static_cast<int>(B));
  } else {
    throw Error("mla_absorb_q: f32 or bf16 q, got " + q.describe());
  }
  K3_CUDA_CHECK_LAUNCH("absorb_q_kernel");
}

void mla_unabsorb_o(const DeviceTensor& o_lat, const DeviceTensor& w_uv, const DeviceTensor& gate,
                    const DeviceTensor& out, cudaStream_t stream) {
  const int64_t H = o_lat.cols / kMlaRank, B = o_lat.rows;
  if (o_lat.cols % kMlaRank != 0 || H == 0) throw Error("mla_unabsorb_o: o_lat must be [B, H·512], got " + o_lat.describe());
  expect_dtype(o_lat, DType::kF32, "mla_unabsorb_o o_lat");
  expect_dtype(w_uv, DType::kBF16, "mla_unabsorb_o w_uv");
  expect_shape(w_uv, H * kMlaV, kMlaRank, "mla_unabsorb_o w_uv");
  expect_shape(out, B, H * kMlaV, "mla_unabsorb_o out");
  const bool has_gate = gate.data != nullptr;
  if (has_gate) expect_shape(gate, B, H * kMlaV, "mla_unabsorb_o gate");
  if (!vec8_ok(o_lat) || !vec8_ok(w_uv)) throw Error("mla_unabsorb_o: needs 16-byte aligned rows");
  if (B == 0) return;
  const dim3 grid(static_cast<unsigned>(H), kMlaV / 8);
  const bool ob = out.dtype == DType::kBF16, gb = gate.dtype == DType::kBF16;
  if (!ob && out.dtype != DType::kF32) throw Error("mla_unabsorb_o: f32 or bf16 out, got " + out.describe());
#define K3_UO(TG, TO, G)                                                                                          \
  unabsorb_o_kernel<TG, TO, G><<<grid, 256, 0, stream>>>(o_lat.as<const float>(), o_lat.ld, w_uv.as<const bf16>(), \
                                                         w_uv.ld, static_cast<const TG*>(gate.data), gate.ld,      \
                                                         out.as<TO>(), out.ld, static_cast<int>(B))
  if (!has_gate) {
    if (ob) {
      K3_UO(float, bf16, false);
    } else {
      K3_UO(float, float, false);
    }
  } else if (gb) {
    if (ob) {
      K3_UO(bf16, bf16, true);
    } else {
      K3_UO(bf16, float, true);
    }
  } else {
    if (ob) {
      K3_UO(float, bf16, true);
    } else {
      K3_UO(float, float, true);
    }
  }
#undef K3_UO
  K3_CUDA_CHECK_LAUNCH("unabsorb_o_kernel");
}

}  // namespace k3::cuda
