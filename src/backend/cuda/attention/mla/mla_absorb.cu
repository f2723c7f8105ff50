// The two per-head products around MLA decode attention (spec §5, absorbed form; CPU reference
// attend_absorbed in backend/cpu/mla.cpp):
//   mla_absorb_q:   q_abs[b][h] = [W_UK[h]ᵀ q_nope[b][h] | q_pe[b][h]]        (bf16 out)
//   mla_unabsorb_o: out[b][h·128 + e] = (W_UV[h] o_lat[b][h])[e] · sigmoid(g)  (output gate fused)
// Both are batched GEMV-like (B ≤ a few hundred tokens). absorb: a CTA takes one head, 8 sequences
// and 128 latent columns; its 16 row groups each load 8 rows × 8 columns of W_UK per thread at once
// (all in flight: at decode the kernel is bound by load latency, not bytes), multiply them with the
// q_nope values in shared memory, and sum their partials in a fixed order. unabsorb keeps one W_UV
// row per warp in registers and loops over the sequences.
#include <string>

#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/attention/mla/mla_util.cuh"

namespace k3::cuda {
namespace {

using namespace mla_detail;
using detail::kVec;
constexpr int kAbsorbBatch = 8;                              // sequences per CTA
constexpr int kAbsorbCols = 128;                             // latent columns per CTA
constexpr int kAbsorbColThreads = kAbsorbCols / kVec;        // 16: 8 columns each
constexpr int kAbsorbRowGroups = 16;                         // over the 128 nope rows
constexpr int kAbsorbRows = kMlaNope / kAbsorbRowGroups;     // 8 rows per thread
constexpr int kAbsorbThreads = kAbsorbColThreads * kAbsorbRowGroups;  // 256
constexpr size_t kAbsorbSmem = sizeof(float) * kAbsorbRowGroups * kAbsorbBatch * kAbsorbCols;  // 64 KiB

template <typename Tq>
__global__ void __launch_bounds__(kAbsorbThreads) absorb_q_kernel(const Tq* __restrict__ q, int64_t ldq,
                                                                  const bf16* __restrict__ w, int64_t ldw,
                                                                  bf16* __restrict__ out, int64_t ldo, int batch) {
  extern __shared__ float partial[];  // [row group][sequence][column]
  __shared__ float qs[kAbsorbBatch][kMlaNope];
  const int h = blockIdx.x, b0 = blockIdx.y * kAbsorbBatch, col0 = blockIdx.z * kAbsorbCols, tid = threadIdx.x;
  const int nb = min(kAbsorbBatch, batch - b0);
  const int ct = tid % kAbsorbColThreads, g = tid / kAbsorbColThreads;
  float wv[kAbsorbRows][kVec];
  const bf16* wg = w + (static_cast<int64_t>(h) * kMlaNope + g * kAbsorbRows) * ldw + col0 + ct * kVec;
#pragma unroll
  for (int r = 0; r < kAbsorbRows; ++r) detail::load8(wg + r * ldw, wv[r]);
  for (int idx = tid; idx < kAbsorbBatch * kMlaNope; idx += kAbsorbThreads) {
    const int bb = idx / kMlaNope, e = idx % kMlaNope;
    qs[bb][e] = bb < nb ? load_val(q + static_cast<int64_t>(b0 + bb) * ldq + h * kMlaQk + e) : 0.0f;
  }
  __syncthreads();
#pragma unroll
  for (int bb = 0; bb < kAbsorbBatch; ++bb) {
    float acc[kVec] = {};
#pragma unroll
    for (int r = 0; r < kAbsorbRows; ++r) {
      const float qv = qs[bb][g * kAbsorbRows + r];
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[k] = fmaf(wv[r][k], qv, acc[k]);
    }
    float* p = partial + (g * kAbsorbBatch + bb) * kAbsorbCols + ct * kVec;
    *reinterpret_cast<float4*>(p) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    *reinterpret_cast<float4*>(p + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
  }
  __syncthreads();
  for (int o = tid; o < nb * kAbsorbCols; o += kAbsorbThreads) {
    const int bb = o / kAbsorbCols, c = o % kAbsorbCols;
    float sum = 0.0f;
    for (int gg = 0; gg < kAbsorbRowGroups; ++gg) sum += partial[(gg * kAbsorbBatch + bb) * kAbsorbCols + c];
    out[static_cast<int64_t>(b0 + bb) * ldo + static_cast<int64_t>(h) * kMlaRow + col0 + c] = __float2bfloat16_rn(sum);
  }
  if (blockIdx.z == 0) {
    for (int o = tid; o < nb * kMlaRope; o += kAbsorbThreads) {
      const int bb = o / kMlaRope, e = o % kMlaRope;
      const int64_t b = b0 + bb;
      out[b * ldo + static_cast<int64_t>(h) * kMlaRow + kMlaRank + e] =
          __float2bfloat16_rn(load_val(q + b * ldq + h * kMlaQk + kMlaNope + e));
    }
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

template <typename Tq>
void launch_absorb(dim3 grid, const DeviceTensor& q, const DeviceTensor& w_uk, const DeviceTensor& q_abs, int64_t B,
                   cudaStream_t stream) {
  allow_dynamic_smem(absorb_q_kernel<Tq>, kAbsorbSmem);
  absorb_q_kernel<Tq><<<grid, kAbsorbThreads, kAbsorbSmem, stream>>>(q.as<const Tq>(), q.ld, w_uk.as<const bf16>(),
                                                                      w_uk.ld, q_abs.as<bf16>(), q_abs.ld,
                                                                      static_cast<int>(B));
}

}  // namespace

void mla_absorb_q(const DeviceTensor& q, const DeviceTensor& w_uk, const DeviceTensor& q_abs, cudaStream_t stream) {
  const int64_t H = q.cols / kMlaQk, B = q.rows;
  if (q.cols % kMlaQk != 0 || H == 0) throw Error("mla_absorb_q: q must be [B, H·192], got " + q.describe());
  expect_dtype(w_uk, DType::kBF16, "mla_absorb_q w_uk");
  expect_shape(w_uk, H * kMlaNope, kMlaRank, "mla_absorb_q w_uk");
  expect_dtype(q_abs, DType::kBF16, "mla_absorb_q q_abs");
  expect_shape(q_abs, B, H * kMlaRow, "mla_absorb_q q_abs");
  if (!vec8_ok(w_uk)) throw Error("mla_absorb_q: w_uk needs 16-byte aligned rows, got " + w_uk.describe());
  if (q.dtype != DType::kBF16 && q.dtype != DType::kF32) throw Error("mla_absorb_q: f32 or bf16 q, got " + q.describe());
  if (B == 0) return;
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>((B + kAbsorbBatch - 1) / kAbsorbBatch),
                  kMlaRank / kAbsorbCols);
  if (q.dtype == DType::kBF16) {
    launch_absorb<bf16>(grid, q, w_uk, q_abs, B, stream);
  } else {
    launch_absorb<float>(grid, q, w_uk, q_abs, B, stream);
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
