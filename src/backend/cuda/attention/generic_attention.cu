// Token mixers for any head geometry (generic_attention.h), plain fp32 SIMT:
//   KDA delta rule: one CTA per (head, sequence) walks the sequence's tokens in order with the D × D
//     state in registers, read from the slot once and written back once. Thread (group g, column c)
//     owns column c of rows g·R … g·R+R−1 (groups·D ≤ 512 threads, R ≤ 32); the column sums Sᵀk and
//     Sᵀq are per-thread partials combined across the groups in shared memory.
//   gated RMSNorm: one warp per (row, head).
//   MLA attention: one CTA per (16-query tile, head, sequence), 4 warps of 4 query rows; 32-key tiles
//     of [k_nope | k_pe] (transposed, lane j scores key j) and v in shared memory; online softmax in
//     fp32; each lane accumulates output dims lane, lane + 32, …
#include "backend/cuda/attention/generic_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/attention/kda/kda_gate.cuh"
#include "backend/cuda/core/kernel_util.cuh"

namespace k3::cuda {
namespace {

using detail::bf16;

using detail::load1;
using detail::sigmoid;
using detail::store1;
using detail::warp_max;

// Host: runs f(Tag<bf16>{}) or f(Tag<float>{}) after the dtype of an f32 / bf16 tensor.
template <typename T>
struct Tag {
  using type = T;
};
template <typename F>
void with_dtype(DType t, F&& f) {
  if (t == DType::kBF16) {
    f(Tag<bf16>{});
  } else {
    f(Tag<float>{});
  }
}

void expect_f32_or_bf16(const DeviceTensor& t, const char* what) {
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16) {
    throw Error(std::string(what) + ": expected f32 or bf16, got " + t.describe());
  }
}

// ---------------------------------------------------------------------------------------------
// KDA delta rule

constexpr int kKdaThreads = 512;   // most threads a CTA uses (groups·D ≤ this)
constexpr int kKdaMaxRows = 32;    // rows a thread owns: D ≤ 128 gives ≥ 4 groups
constexpr int kKdaMinThreads = 128;  // warps 0 and 1 normalise q and k, the rest load v and gates

struct KdaArgs {
  const int32_t* cu;  // nullptr: one row per sequence
  const int32_t* slots;
  int heads, dim, groups, rows_per_group;
  const void* q; int64_t ldq;
  const void* k; int64_t ldk;
  const void* v; int64_t ldv;
  const void* f; int64_t ldf;
  const void* b; int64_t ldb;
  KdaGate gate;
  float q_scale;
  float* state;
  void* o; int64_t ldo;
};

template <typename Tin, typename Tout>
__global__ void __launch_bounds__(kKdaThreads) kda_recurrent_generic_kernel(KdaArgs a) {
  __shared__ float qn[kGenericMaxHeadDim], kn[kGenericMaxHeadDim], vv[kGenericMaxHeadDim], alpha[kGenericMaxHeadDim];
  __shared__ float red_w[kKdaThreads], red_o[kKdaThreads];  // [group][column] partial column sums
  __shared__ float beta_s;
  const int h = blockIdx.x, s = blockIdx.y, D = a.dim;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t row0 = a.cu != nullptr ? a.cu[s] : s;
  const int64_t len = a.cu != nullptr ? a.cu[s + 1] - row0 : 1;
  const int col = tid % D, grp = tid / D;
  const bool active = grp < a.groups;
  const int r0 = grp * a.rows_per_group;
  const int nr = active ? max(0, min(a.rows_per_group, D - r0)) : 0;
  float* S = a.state + (static_cast<int64_t>(a.slots[s]) * a.heads + h) * D * D;
  float st[kKdaMaxRows];
#pragma unroll
  for (int i = 0; i < kKdaMaxRows; ++i) st[i] = i < nr ? S[(r0 + i) * D + col] : 0.0f;

  for (int64_t t = 0; t < len; ++t) {
    const int64_t row = row0 + t;
    if (warp < 2) {  // warp 0: q, warp 1: k — L2-normalised over the head (q also scaled by D^-½)
      const Tin* x = warp == 0 ? static_cast<const Tin*>(a.q) + row * a.ldq : static_cast<const Tin*>(a.k) + row * a.ldk;
      float* dst = warp == 0 ? qn : kn;
      float ss = 0.0f;
      for (int d = lane; d < D; d += 32) {
        const float xv = load1(x + h * D + d);
        dst[d] = xv;
        ss += xv * xv;
      }
      const float r = (warp == 0 ? a.q_scale : 1.0f) / sqrtf(detail::warp_sum(ss) + 1e-6f);
      for (int d = lane; d < D; d += 32) dst[d] *= r;
    } else {  // the forget gate α = e^g per channel, v, β
      const float ea = expf(a.gate.a_log[h]);
      const Tin* f = static_cast<const Tin*>(a.f) + row * a.ldf + h * D;
      const Tin* v = static_cast<const Tin*>(a.v) + row * a.ldv + h * D;
      for (int d = tid - 64; d < D; d += static_cast<int>(blockDim.x) - 64) {
        const float z = load1(f + d) + a.gate.dt_bias[h * D + d];
        const float g = detail::kda_log_decay(a.gate, ea, z);
        alpha[d] = expf(g);
        vv[d] = load1(v + d);
      }
      if (tid == 64) beta_s = sigmoid(load1(static_cast<const Tin*>(a.b) + row * a.ldb + h));
    }
    __syncthreads();

    // S ← diag(α) S and this thread's part of Sᵀk.
    float pw = 0.0f;
#pragma unroll
    for (int i = 0; i < kKdaMaxRows; ++i) {
      if (i < nr) {
        st[i] *= alpha[r0 + i];
        pw = fmaf(st[i], kn[r0 + i], pw);
      }
    }
    if (active) red_w[grp * D + col] = pw;
    __syncthreads();

    // u = β(v − Sᵀk); S += k uᵀ and this thread's part of Sᵀq.
    if (active) {
      float w = 0.0f;
      for (int g = 0; g < a.groups; ++g) w += red_w[g * D + col];
      const float u = beta_s * (vv[col] - w);
      float po = 0.0f;
#pragma unroll
      for (int i = 0; i < kKdaMaxRows; ++i) {
        if (i < nr) {
          st[i] = fmaf(kn[r0 + i], u, st[i]);
          po = fmaf(st[i], qn[r0 + i], po);
        }
      }
      red_o[grp * D + col] = po;
    }
    __syncthreads();
    if (tid < D) {
      float o = 0.0f;
      for (int g = 0; g < a.groups; ++g) o += red_o[g * D + tid];
      store1(static_cast<Tout*>(a.o) + row * a.ldo + h * D + tid, o);
    }
  }
#pragma unroll
  for (int i = 0; i < kKdaMaxRows; ++i) {
    if (i < nr) S[(r0 + i) * D + col] = st[i];
  }
}

// ---------------------------------------------------------------------------------------------
// Gated RMSNorm

constexpr int kNormThreads = 256;
constexpr int kPerLane = kGenericMaxHeadDim / 32;  // head dims a lane holds

template <typename To, typename Tg, typename Ty>
__global__ void __launch_bounds__(kNormThreads)
    gated_norm_generic_kernel(const To* __restrict__ o, int64_t ldo, const Tg* __restrict__ g, int64_t ldg,
                              const float* __restrict__ w, int dim, float eps, Ty* __restrict__ y, int64_t ldy,
                              int64_t rows, int heads) {
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (item >= rows * heads) return;  // whole warps
  const int64_t r = item / heads;
  const int h = static_cast<int>(item % heads), lane = threadIdx.x & 31;
  float x[kPerLane];
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + 32 * c;
    x[c] = d < dim ? load1(o + r * ldo + h * dim + d) : 0.0f;
    ss += x[c] * x[c];
  }
  const float rs = 1.0f / sqrtf(detail::warp_sum(ss) / static_cast<float>(dim) + eps);
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < dim) store1(y + r * ldy + h * dim + d, x[c] * rs * w[d] * sigmoid(load1(g + r * ldg + h * dim + d)));
  }
}

// ---------------------------------------------------------------------------------------------
// MLA attention

constexpr int kMlaThreads = 128;
constexpr int kMlaRows = 4;                                // query rows per warp
constexpr int kMlaBM = kMlaRows * (kMlaThreads / 32);      // 16 query rows per CTA
constexpr int kMlaBN = 32;                                 // keys per tile (one per lane)
constexpr int kMlaKtLd = kMlaBN + 1;                       // padded: conflict-free transposed stores

struct MlaArgs {
  const int32_t* cu_q;
  const int32_t* cu_kv;
  MlaDims dims;
  const void* q; int64_t ldq;
  const void* kv; int64_t ldkv;
  const void* kpe; int64_t ldpe;
  const void* gate; int64_t ldg;  // nullptr: no gate
  float scale;
  void* out; int64_t ldo;
};

// Shared memory floats: Q [BM][dqk], Kᵀ [dqk][BN + 1], V [BN][dv].
size_t mla_smem_bytes(const MlaDims& d) {
  const int dqk = d.nope + d.rope;
  return sizeof(float) * static_cast<size_t>(kMlaBM * dqk + dqk * kMlaKtLd + kMlaBN * d.v);
}

template <typename Tin, typename Tg, typename Tout>
__global__ void __launch_bounds__(kMlaThreads) mla_attention_generic_kernel(MlaArgs a) {
  extern __shared__ float smem[];
  const int nope = a.dims.nope, dv = a.dims.v, dqk = nope + a.dims.rope;
  float* sq = smem;
  float* skt = sq + kMlaBM * dqk;
  float* sv = skt + dqk * kMlaKtLd;
  const int qt = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
  const int q0 = a.cu_q[s], qlen = a.cu_q[s + 1] - q0;
  const int kv0 = a.cu_kv[s], kvlen = a.cu_kv[s + 1] - kv0;
  if (qt * kMlaBM >= qlen) return;
  const int off = kvlen - qlen;  // query i sees keys j ≤ off + i
  const int last_key = off + min(qlen, qt * kMlaBM + kMlaBM) - 1;
  const int tid = threadIdx.x, lane = tid & 31, lr0 = (tid >> 5) * kMlaRows;
  const Tin* q = static_cast<const Tin*>(a.q);
  const Tin* kv = static_cast<const Tin*>(a.kv);
  const Tin* kpe = static_cast<const Tin*>(a.kpe);
  const int64_t kv_head = static_cast<int64_t>(h) * (nope + dv);

  for (int idx = tid; idx < kMlaBM * dqk; idx += kMlaThreads) {
    const int r = idx / dqk, e = idx % dqk, i = qt * kMlaBM + r;
    sq[idx] = i < qlen ? load1(q + static_cast<int64_t>(q0 + i) * a.ldq + h * dqk + e) : 0.0f;
  }
  float m[kMlaRows], l[kMlaRows], acc[kMlaRows][kPerLane];
#pragma unroll
  for (int r = 0; r < kMlaRows; ++r) {
    m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[r][c] = 0.0f;
  }

  for (int j0 = 0; j0 <= last_key; j0 += kMlaBN) {
    __syncthreads();  // the previous tile is consumed
    for (int idx = tid; idx < kMlaBN * dqk; idx += kMlaThreads) {
      const int j = idx / dqk, e = idx % dqk, key = j0 + j;
      float x = 0.0f;  // keys past the sequence: zeros (their weights are 0, and 0·NaN would not be)
      if (key < kvlen) {
        const int64_t row = kv0 + key;
        x = e < nope ? load1(kv + row * a.ldkv + kv_head + e) : load1(kpe + row * a.ldpe + (e - nope));
      }
      skt[e * kMlaKtLd + j] = x;
    }
    for (int idx = tid; idx < kMlaBN * dv; idx += kMlaThreads) {
      const int j = idx / dv, e = idx % dv, key = j0 + j;
      sv[idx] = key < kvlen ? load1(kv + static_cast<int64_t>(kv0 + key) * a.ldkv + kv_head + nope + e) : 0.0f;
    }
    __syncthreads();

    float sc[kMlaRows];
#pragma unroll
    for (int r = 0; r < kMlaRows; ++r) sc[r] = 0.0f;
    for (int e = 0; e < dqk; ++e) {
      const float kt = skt[e * kMlaKtLd + lane];
#pragma unroll
      for (int r = 0; r < kMlaRows; ++r) sc[r] = fmaf(sq[(lr0 + r) * dqk + e], kt, sc[r]);
    }
#pragma unroll
    for (int r = 0; r < kMlaRows; ++r) {
      const int i = qt * kMlaBM + lr0 + r, limit = off + i;
      if (i >= qlen || j0 > limit) continue;  // uniform over the warp
      const bool seen = j0 + lane <= limit;
      const float x = seen ? sc[r] * a.scale : -INFINITY;
      const float mn = fmaxf(m[r], warp_max(x));  // finite: key j0 is visible
      const float corr = expf(m[r] - mn);         // 0 on the first visible tile
      const float p = seen ? expf(x - mn) : 0.0f;
      m[r] = mn;
      l[r] = l[r] * corr + detail::warp_sum(p);
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) acc[r][c] *= corr;
      const int jn = min(kMlaBN, limit - j0 + 1);
      for (int j = 0; j < jn; ++j) {
        const float pj = __shfl_sync(0xFFFFFFFFu, p, j);
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) {
          const int e = lane + 32 * c;
          if (e < dv) acc[r][c] = fmaf(pj, sv[j * dv + e], acc[r][c]);
        }
      }
    }
  }

  const Tg* gate = static_cast<const Tg*>(a.gate);
  Tout* out = static_cast<Tout*>(a.out);
#pragma unroll
  for (int r = 0; r < kMlaRows; ++r) {
    const int i = qt * kMlaBM + lr0 + r;
    if (i >= qlen) continue;
    const int64_t row = q0 + i;
    const float inv = 1.0f / l[r];
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int e = lane + 32 * c;
      if (e >= dv) continue;
      float y = acc[r][c] * inv;
      if (gate != nullptr) y *= sigmoid(load1(gate + row * a.ldg + h * dv + e));
      store1(out + row * a.ldo + h * dv + e, y);
    }
  }
}

}  // namespace

void kda_recurrent_generic(const KdaBatch& batch, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                           const DeviceTensor& f, const DeviceTensor& b, const KdaGate& gate, const KdaStatePool& pool,
                           const DeviceTensor& o, cudaStream_t stream) {
  const int64_t D = pool.head_dim, H = pool.heads, P = pool.proj_dim();
  if (D < 1 || D > kGenericMaxHeadDim || H < 1) {
    throw Error("kda_recurrent_generic: head dim " + std::to_string(D) + " × " + std::to_string(H) +
                " heads (head dim must be in [1, 128])");
  }
  const int64_t T = batch.cu_seqlens != nullptr ? batch.total_rows : batch.n;
  expect_shape(q, T, P, "kda_recurrent_generic q");
  expect_shape(k, T, P, "kda_recurrent_generic k");
  expect_shape(v, T, P, "kda_recurrent_generic v");
  expect_shape(f, T, P, "kda_recurrent_generic f");
  expect_shape(o, T, P, "kda_recurrent_generic o");
  if (b.rows != T || b.cols < H) {
    throw Error("kda_recurrent_generic b: expected [" + std::to_string(T) + ", >= " + std::to_string(H) + "], got " +
                b.describe());
  }
  expect_f32_or_bf16(q, "kda_recurrent_generic q");
  for (const DeviceTensor* x : {&k, &v, &f, &b}) expect_dtype(*x, q.dtype, "kda_recurrent_generic inputs (one dtype)");
  expect_f32_or_bf16(o, "kda_recurrent_generic o");
  if (gate.a_log == nullptr || gate.dt_bias == nullptr) throw Error("kda_recurrent_generic: gate parameters missing");
  if (batch.n == 0 || T == 0) return;
  const int dim = static_cast<int>(D);
  const int groups = std::min(dim, kKdaThreads / dim);
  const int rows_per_group = (dim + groups - 1) / groups;
  const int threads = std::max(kKdaMinThreads, (groups * dim + 31) / 32 * 32);
  const KdaArgs a{batch.cu_seqlens, batch.slots, static_cast<int>(H), dim, groups, rows_per_group,
                  q.data, q.ld, k.data, k.ld, v.data, v.ld, f.data, f.ld, b.data, b.ld, gate,
                  1.0f / std::sqrt(static_cast<float>(D)), pool.recurrent, o.data, o.ld};
  const dim3 grid(static_cast<unsigned>(H), static_cast<unsigned>(batch.n));
  with_dtype(q.dtype, [&](auto ti) {
    with_dtype(o.dtype, [&](auto to) {
      kda_recurrent_generic_kernel<typename decltype(ti)::type, typename decltype(to)::type>
          <<<grid, threads, 0, stream>>>(a);
    });
  });
  K3_CUDA_CHECK_LAUNCH("kda_recurrent_generic_kernel");
}

void kda_gated_rms_norm_generic(const DeviceTensor& o, const DeviceTensor& g, const float* w, int head_dim, float eps,
                                const DeviceTensor& y, cudaStream_t stream) {
  if (head_dim < 1 || head_dim > kGenericMaxHeadDim || o.cols % head_dim != 0) {
    throw Error("kda_gated_rms_norm_generic: head dim " + std::to_string(head_dim) +
                " (must be in [1, 128] and divide the width) for " + o.describe());
  }
  expect_shape(g, o.rows, o.cols, "kda_gated_rms_norm_generic gate");
  expect_shape(y, o.rows, o.cols, "kda_gated_rms_norm_generic output");
  expect_f32_or_bf16(o, "kda_gated_rms_norm_generic o");
  expect_f32_or_bf16(g, "kda_gated_rms_norm_generic gate");
  expect_f32_or_bf16(y, "kda_gated_rms_norm_generic output");
  const int heads = static_cast<int>(o.cols / head_dim);
  const int64_t warps = o.rows * heads;
  if (warps == 0) return;
  const unsigned blocks = static_cast<unsigned>((warps * 32 + kNormThreads - 1) / kNormThreads);
  with_dtype(o.dtype, [&](auto to) {
    with_dtype(g.dtype, [&](auto tg) {
      with_dtype(y.dtype, [&](auto ty) {
        using To = typename decltype(to)::type;
        using Tg = typename decltype(tg)::type;
        using Ty = typename decltype(ty)::type;
        gated_norm_generic_kernel<To, Tg, Ty><<<blocks, kNormThreads, 0, stream>>>(
            o.as<const To>(), o.ld, g.as<const Tg>(), g.ld, w, head_dim, eps, y.as<Ty>(), y.ld, o.rows, heads);
      });
    });
  });
  K3_CUDA_CHECK_LAUNCH("gated_norm_generic_kernel");
}

void mla_attention_generic(const int32_t* cu_q, const int32_t* cu_kv, int n, int max_q_len, const MlaDims& dims,
                           const DeviceTensor& q, const DeviceTensor& kv, const DeviceTensor& k_pe,
                           const DeviceTensor& gate, float scale, const DeviceTensor& out, cudaStream_t stream) {
  const auto in_range = [](int x, int lo) { return x >= lo && x <= kGenericMaxHeadDim; };
  if (dims.heads < 1 || !in_range(dims.nope, 0) || !in_range(dims.rope, 0) || !in_range(dims.v, 1) ||
      dims.nope + dims.rope == 0) {
    throw Error("mla_attention_generic: dims heads " + std::to_string(dims.heads) + " nope " +
                std::to_string(dims.nope) + " rope " + std::to_string(dims.rope) + " v " + std::to_string(dims.v) +
                " (each ≤ 128, nope + rope and v > 0)");
  }
  const int64_t H = dims.heads, Tq = q.rows, Tkv = kv.rows;
  expect_shape(q, Tq, H * (dims.nope + dims.rope), "mla_attention_generic q");
  expect_shape(kv, Tkv, H * (dims.nope + dims.v), "mla_attention_generic kv");
  expect_shape(k_pe, Tkv, dims.rope, "mla_attention_generic k_pe");
  expect_shape(out, Tq, H * dims.v, "mla_attention_generic out");
  expect_f32_or_bf16(q, "mla_attention_generic q");
  expect_dtype(kv, q.dtype, "mla_attention_generic kv (the dtype of q)");
  expect_dtype(k_pe, q.dtype, "mla_attention_generic k_pe (the dtype of q)");
  expect_f32_or_bf16(out, "mla_attention_generic out");
  const bool has_gate = gate.data != nullptr;
  if (has_gate) {
    expect_shape(gate, Tq, H * dims.v, "mla_attention_generic gate");
    expect_f32_or_bf16(gate, "mla_attention_generic gate");
  }
  if (n == 0 || Tq == 0 || max_q_len <= 0) return;
  const MlaArgs a{cu_q, cu_kv, dims, q.data, q.ld, kv.data, kv.ld, k_pe.data, k_pe.ld,
                  has_gate ? gate.data : nullptr, gate.ld, scale, out.data, out.ld};
  const dim3 grid(static_cast<unsigned>((max_q_len + kMlaBM - 1) / kMlaBM), static_cast<unsigned>(H),
                  static_cast<unsigned>(n));
  const int smem = static_cast<int>(mla_smem_bytes(dims));
  with_dtype(q.dtype, [&](auto ti) {
    with_dtype(has_gate ? gate.dtype : DType::kF32, [&](auto tg) {
      with_dtype(out.dtype, [&](auto to) {
        const auto kernel = mla_attention_generic_kernel<typename decltype(ti)::type, typename decltype(tg)::type,
                                                         typename decltype(to)::type>;
        allow_dynamic_smem(kernel, smem);
        kernel<<<grid, kMlaThreads, smem, stream>>>(a);
      });
    });
  });
  K3_CUDA_CHECK_LAUNCH("mla_attention_generic_kernel");
}

}  // namespace k3::cuda
