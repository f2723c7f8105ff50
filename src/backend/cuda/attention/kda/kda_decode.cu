// KDA decode step (spec §6.3–§6.5, §6.7), one token per sequence, one CTA per (head, sequence):
// the gates, β and the L2 norms of q and k, then the delta rule on the slot's [D × D] fp32 state,
// read once into registers and written once:
//   S ← diag(α) S;  u = β (v − Sᵀ k);  S ← S + k uᵀ;  o = Sᵀ q
// Thread (warp w, lane l) owns rows 16w…16w+15 and columns 4l…4l+3 of S (a warp reads 512
// contiguous bytes per row); the two column reductions over rows meet in shared memory. With
// kNorm the gated RMSNorm of the head (spec §6.7) is applied before the single store.
#include "backend/cuda/core/check.h"
#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/attention/kda/kda_gate.cuh"
#include "backend/cuda/core/kernel_util.cuh"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::load1;
using detail::load4;
using detail::sigmoid;
using detail::store4;
constexpr int D = kKdaHeadDim;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = D / kWarps;  // 16 state rows per thread

struct DecodeArgs {
  const int32_t* slots;
  int heads;
  const void* q; int64_t ldq;
  const void* k; int64_t ldk;
  const void* v; int64_t ldv;
  const void* f; int64_t ldf;
  const void* b; int64_t ldb;
  KdaGate gate;
  float q_scale;
  float* state;
  const float* o_norm;
  const void* g; int64_t ldg;
  float eps;
  void* out; int64_t ldout;
};


template <typename Tin, typename Tout, bool kNorm>
__global__ void __launch_bounds__(kThreads) kda_decode_kernel(DecodeArgs a) {
  __shared__ __align__(16) float qn[D], kn[D], alpha[D], vv[D];
  __shared__ __align__(16) float red[kWarps][D], red2[kWarps][D];
  __shared__ float beta_s;
  const int h = blockIdx.x, bi = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int c0 = lane * 4, r0 = warp * kRows;
  float* S = a.state + static_cast<int64_t>(a.slots[bi]) * a.heads * D * D + static_cast<int64_t>(h) * D * D;
  float4 st[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) st[i] = *reinterpret_cast<const float4*>(S + (r0 + i) * D + c0);

  const Tin* q = static_cast<const Tin*>(a.q) + bi * a.ldq + h * D;
  const Tin* k = static_cast<const Tin*>(a.k) + bi * a.ldk + h * D;
  if (warp < 2) {  // warp 0: q, warp 1: k — L2 norm over the head (q also scaled by D^-½)
    float x[4];
    load4(warp == 0 ? q + c0 : k + c0, x);
    float ss = x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3];
    ss = detail::warp_sum(ss);
    const float r = (warp == 0 ? a.q_scale : 1.0f) / sqrtf(ss + 1e-6f);
    float* dst = warp == 0 ? qn : kn;
#pragma unroll
    for (int e = 0; e < 4; ++e) dst[c0 + e] = x[e] * r;
  } else if (warp < 4) {  // warps 2, 3: the forget gate, α = e^g
    const Tin* f = static_cast<const Tin*>(a.f) + bi * a.ldf + h * D;
    const float ea = expf(a.gate.a_log[h]);
    for (int d = tid - 64; d < D; d += 64) {
      const float z = load1(f + d) + a.gate.dt_bias[h * D + d];
      alpha[d] = expf(detail::kda_log_decay(a.gate, ea, z));
    }
  } else if (warp == 4) {
    float x[4];
    load4(static_cast<const Tin*>(a.v) + bi * a.ldv + h * D + c0, x);
#pragma unroll
    for (int e = 0; e < 4; ++e) vv[c0 + e] = x[e];
    if (lane == 0) beta_s = sigmoid(load1(static_cast<const Tin*>(a.b) + bi * a.ldb + h));
  }
  __syncthreads();

  // Decay, then this thread's part of Sᵀk.
  float p[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float al = alpha[r0 + i], kk = kn[r0 + i];
    st[i].x *= al, st[i].y *= al, st[i].z *= al, st[i].w *= al;
    p[0] = fmaf(st[i].x, kk, p[0]), p[1] = fmaf(st[i].y, kk, p[1]);
    p[2] = fmaf(st[i].z, kk, p[2]), p[3] = fmaf(st[i].w, kk, p[3]);
  }
  *reinterpret_cast<float4*>(&red[warp][c0]) = make_float4(p[0], p[1], p[2], p[3]);
  __syncthreads();
  float u[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += red[w][c0 + e];
    u[e] = beta_s * (vv[c0 + e] - sum);
  }
  // Rank-1 write, this thread's part of Sᵀq, and the state back to the slot.
  float po[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float kk = kn[r0 + i], qq = qn[r0 + i];
    st[i].x = fmaf(kk, u[0], st[i].x), st[i].y = fmaf(kk, u[1], st[i].y);
    st[i].z = fmaf(kk, u[2], st[i].z), st[i].w = fmaf(kk, u[3], st[i].w);
    po[0] = fmaf(st[i].x, qq, po[0]), po[1] = fmaf(st[i].y, qq, po[1]);
    po[2] = fmaf(st[i].z, qq, po[2]), po[3] = fmaf(st[i].w, qq, po[3]);
    *reinterpret_cast<float4*>(S + (r0 + i) * D + c0) = st[i];
  }
  *reinterpret_cast<float4*>(&red2[warp][c0]) = make_float4(po[0], po[1], po[2], po[3]);
  __syncthreads();
  if (warp == 0) {
    float o[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += red2[w][c0 + e];
      o[e] = sum;
    }
    if constexpr (kNorm) {
      float ss = o[0] * o[0] + o[1] * o[1] + o[2] * o[2] + o[3] * o[3];
      ss = detail::warp_sum(ss);
      const float r = 1.0f / sqrtf(ss / static_cast<float>(D) + a.eps);
      float g[4];
      load4(static_cast<const Tin*>(a.g) + bi * a.ldg + h * D + c0, g);
#pragma unroll
      for (int e = 0; e < 4; ++e) o[e] = o[e] * r * a.o_norm[c0 + e] * sigmoid(g[e]);
    }
    store4(static_cast<Tout*>(a.out) + bi * a.ldout + h * D + c0, o);
  }
}

template <typename Tin, typename Tout>
void launch(const DecodeArgs& a, int n, bool norm, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.heads), static_cast<unsigned>(n));
  if (norm) {
    kda_decode_kernel<Tin, Tout, true><<<grid, kThreads, 0, stream>>>(a);
  } else {
    kda_decode_kernel<Tin, Tout, false><<<grid, kThreads, 0, stream>>>(a);
  }
  K3_CUDA_CHECK_LAUNCH("kda_decode_kernel");
}

}  // namespace

void kda_decode(const KdaBatch& batch, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                const DeviceTensor& f, const DeviceTensor& b, const KdaGate& gate, const KdaStatePool& pool,
                const float* o_norm, const DeviceTensor& g_logits, float eps, const DeviceTensor& out,
                cudaStream_t stream) {
  if (pool.head_dim != D) throw Error("kda_decode: head dim " + std::to_string(pool.head_dim) + " is not built (128)");
  const int64_t H = pool.heads, P = pool.proj_dim(), n = batch.n;
  expect_shape(q, n, P, "kda_decode q");
  expect_shape(k, n, P, "kda_decode k");
  expect_shape(v, n, P, "kda_decode v");
  expect_shape(f, n, P, "kda_decode f");
  if (b.rows != n || b.cols < H) throw Error("kda_decode b: expected [" + std::to_string(n) + ", >= H], got " + b.describe());
  expect_shape(out, n, P, "kda_decode out");
  const DType t = q.dtype;
  for (const DeviceTensor* x : {&k, &v, &f, &b}) expect_dtype(*x, t, "kda_decode inputs (one dtype)");
  const bool norm = o_norm != nullptr;
  if (norm) {
    expect_shape(g_logits, n, P, "kda_decode gate logits");
    expect_dtype(g_logits, t, "kda_decode gate logits");
  }
  for (const DeviceTensor* x : {&q, &k, &v, &f, &out}) {
    if (!vec8_ok(*x)) throw Error("kda_decode: needs 16-byte aligned rows, got " + x->describe());
  }
  if (t != DType::kF32 && t != DType::kBF16) throw Error("kda_decode: f32 or bf16 inputs, got " + q.describe());
  if (out.dtype != DType::kF32 && out.dtype != DType::kBF16) throw Error("kda_decode: f32 or bf16 out, got " + out.describe());
  if (gate.a_log == nullptr || gate.dt_bias == nullptr) throw Error("kda_decode: gate parameters missing");
  if (n == 0) return;
  const DecodeArgs a{batch.slots, static_cast<int>(H), q.data, q.ld, k.data, k.ld, v.data, v.ld, f.data, f.ld,
                     b.data, b.ld, gate, 1.0f / sqrtf(static_cast<float>(D)), pool.recurrent, o_norm,
                     g_logits.data, g_logits.ld, eps, out.data, out.ld};
  const bool ib = t == DType::kBF16, ob = out.dtype == DType::kBF16;
  if (ib && ob) launch<bf16, bf16>(a, static_cast<int>(n), norm, stream);
  if (ib && !ob) launch<bf16, float>(a, static_cast<int>(n), norm, stream);
  if (!ib && ob) launch<float, bf16>(a, static_cast<int>(n), norm, stream);
  if (!ib && !ob) launch<float, float>(a, static_cast<int>(n), norm, stream);
}

}  // namespace k3::cuda
