// KDA on the CPU (spec §6): the causal depthwise conv + SiLU with conv state, gates, L2 norm, the
// delta-rule core (chunked prefill / recurrent decode) and the gated RMSNorm, as the operations of
// model/blocks.h kda_block, which composes them with the projections.
#include "backend/cpu/kda.h"

#include <cmath>

#include "backend/cpu/block_ops.h"
#include "model/blocks.h"
#include "core/error.h"

namespace k3::cpu {
namespace {

float silu(float x) { return x * sigmoid(x); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // threshold 20 (spec §6.3)

// Causal depthwise conv + SiLU over one sequence's n rows of x [·][P] starting at row0, continuing
// from `state` ([W−1][P], oldest first), which is then advanced to the last W−1 inputs.
void short_conv(const Tensor& x, int64_t row0, int64_t n, const Floats& weight, int64_t width, float* state, Tensor& y) {
  const int64_t P = x.cols, hist = width - 1;
  auto input = [&](int64_t t, int64_t ch) {  // t in [−hist, n): negative = from the state
    return t < 0 ? state[(hist + t) * P + ch] : x.row(row0 + t)[ch];
  };
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < P; ++ch) {
    const float* w = weight.data() + ch * width;
    for (int64_t t = 0; t < n; ++t) {
      float acc = 0;
      for (int64_t j = 0; j < width; ++j) acc += w[j] * input(t - hist + j, ch);
      y.row(row0 + t)[ch] = silu(acc);
    }
    float last[8];  // W ≤ 9 is checked by the caller
    for (int64_t j = 0; j < hist; ++j) last[j] = input(n - hist + j, ch);
    for (int64_t j = 0; j < hist; ++j) state[j * P + ch] = last[j];
  }
}

void l2_normalize(float* x, int64_t n, float scale) {
  float ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float r = scale / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= r;
}

}  // namespace

void kda_head_recurrent(const KdaHeadInputs& in, float* S, float* out) {
  const int64_t D = in.dim;
  std::vector<float> u(static_cast<size_t>(D));
  for (int64_t t = 0; t < in.tokens; ++t) {
    const float *q = in.q + t * D, *k = in.k + t * D, *v = in.v + t * D, *g = in.g + t * D;
    for (int64_t i = 0; i < D; ++i) {
      const float a = std::exp(g[i]);
      for (int64_t j = 0; j < D; ++j) S[i * D + j] *= a;
    }
    for (int64_t j = 0; j < D; ++j) u[j] = v[j];
    for (int64_t i = 0; i < D; ++i) {
      for (int64_t j = 0; j < D; ++j) u[j] -= S[i * D + j] * k[i];
    }
    for (int64_t j = 0; j < D; ++j) u[j] *= in.beta[t];
    float* o = out + t * D;
    for (int64_t j = 0; j < D; ++j) o[j] = 0;
    for (int64_t i = 0; i < D; ++i) {
      for (int64_t j = 0; j < D; ++j) {
        S[i * D + j] += k[i] * u[j];
        o[j] += S[i * D + j] * q[i];
      }
    }
  }
}

void kda_head_chunked(const KdaHeadInputs& in, float* S, float* out, int64_t chunk) {
  const int64_t D = in.dim;
  const size_t CD = static_cast<size_t>(chunk * D);
  std::vector<float> G(CD), W(CD), U(CD), A(static_cast<size_t>(chunk * chunk)), diff(static_cast<size_t>(D));
  for (int64_t c0 = 0; c0 < in.tokens; c0 += chunk) {
    const int64_t C = std::min(chunk, in.tokens - c0);
    const float *q = in.q + c0 * D, *k = in.k + c0 * D, *v = in.v + c0 * D, *g = in.g + c0 * D, *beta = in.beta + c0;
    // G_i: cumulative log decay within the chunk.
    for (int64_t d = 0; d < D; ++d) G[d] = g[d];
    for (int64_t i = 1; i < C; ++i) {
      for (int64_t d = 0; d < D; ++d) G[i * D + d] = G[(i - 1) * D + d] + g[i * D + d];
    }
    // Forward substitution of (I + A) X = diag(β) [k ⊙ e^G | v] with A[i][j] = β_i ⟨k_i ⊙ e^{G_i−G_j}, k_j⟩, j < i.
    for (int64_t i = 0; i < C; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        float acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += k[i * D + d] * std::exp(G[i * D + d] - G[j * D + d]) * k[j * D + d];
        A[i * chunk + j] = beta[i] * acc;
      }
      for (int64_t d = 0; d < D; ++d) {
        float w = beta[i] * k[i * D + d] * std::exp(G[i * D + d]);
        float uu = beta[i] * v[i * D + d];
        for (int64_t j = 0; j < i; ++j) {
          w -= A[i * chunk + j] * W[j * D + d];
          uu -= A[i * chunk + j] * U[j * D + d];
        }
        W[i * D + d] = w;
        U[i * D + d] = uu;
      }
    }
    // V' = U − W S₀ (kept in U).
    for (int64_t i = 0; i < C; ++i) {
      for (int64_t a = 0; a < D; ++a) {
        const float w = W[i * D + a];
        for (int64_t j = 0; j < D; ++j) U[i * D + j] -= w * S[a * D + j];
      }
    }
    // O_i = (q_i ⊙ e^{G_i}) S₀ + Σ_{j≤i} ⟨q_i ⊙ e^{G_i−G_j}, k_j⟩ V'_j.
    for (int64_t i = 0; i < C; ++i) {
      float* o = out + (c0 + i) * D;
      for (int64_t j = 0; j < D; ++j) o[j] = 0;
      for (int64_t a = 0; a < D; ++a) {
        const float qa = q[i * D + a] * std::exp(G[i * D + a]);
        for (int64_t j = 0; j < D; ++j) o[j] += qa * S[a * D + j];
      }
      for (int64_t j = 0; j <= i; ++j) {
        float s = 0;
        for (int64_t d = 0; d < D; ++d) s += q[i * D + d] * std::exp(G[i * D + d] - G[j * D + d]) * k[j * D + d];
        for (int64_t e = 0; e < D; ++e) o[e] += s * U[j * D + e];
      }
    }
    // S_C = diag(e^{G_C}) S₀ + Σ_j (k_j ⊙ e^{G_C−G_j}) V'_jᵀ.
    const float* Gl = G.data() + (C - 1) * D;
    for (int64_t a = 0; a < D; ++a) {
      const float decay = std::exp(Gl[a]);
      for (int64_t j = 0; j < D; ++j) S[a * D + j] *= decay;
    }
    for (int64_t i = 0; i < C; ++i) {
      for (int64_t a = 0; a < D; ++a) diff[a] = k[i * D + a] * std::exp(Gl[a] - G[i * D + a]);
      for (int64_t a = 0; a < D; ++a) {
        for (int64_t j = 0; j < D; ++j) S[a * D + j] += diff[a] * U[i * D + j];
      }
    }
  }
}

KdaBuffers BlockOps::kda_buffers(const KdaWeights&, const Tensor& x) const {
  const KdaConfig& kc = c_.kda;
  const int64_t width = kc.short_conv_kernel_size;
  if (width < 1 || width > 9) throw Error(Where{c_.file, "", "short_conv_kernel_size"}, "must be in [1, 9]");
  const int64_t T = x.rows, P = kc.projection_dim();
  KdaBuffers s;
  s.q = Tensor(T, P);
  s.k = Tensor(T, P);
  s.v = Tensor(T, P);
  s.y = Tensor(T, P);
  return s;
}

void BlockOps::kda_short_conv(int64_t layer, const KdaWeights& w, KdaBuffers& s) const {
  const KdaConfig& kc = c_.kda;
  const int64_t H = kc.num_heads, D = kc.head_dim, P = kc.projection_dim(), width = kc.short_conv_kernel_size;
  for (const SeqSlice& sl : slices_) {
    KdaLayerState& st = sl.state->kda[static_cast<size_t>(layer)];
    const size_t hist = static_cast<size_t>((width - 1) * P);
    if (st.conv.empty()) st.conv.assign(3 * hist, 0.0f);
    if (st.recurrent.empty()) st.recurrent.assign(static_cast<size_t>(H * D * D), 0.0f);
    short_conv(s.q_pre, sl.row0, sl.n, w.conv.q, width, st.conv.data(), s.q);
    short_conv(s.k_pre, sl.row0, sl.n, w.conv.k, width, st.conv.data() + hist, s.k);
    short_conv(s.v_pre, sl.row0, sl.n, w.conv.v, width, st.conv.data() + 2 * hist, s.v);
  }
}

void BlockOps::kda_attention(int64_t layer, const KdaWeights& w, KdaBuffers& s) const {
  const KdaConfig& kc = c_.kda;
  const int64_t T = s.q.rows, H = kc.num_heads, D = kc.head_dim;
  Tensor &f = s.f, &b = s.b;
  // Forget gate (log decay) in place of f, β in place of b (spec §6.3).
#pragma omp parallel for schedule(static) if (T > 1)
  for (int64_t t = 0; t < T; ++t) {
    float* ft = f.row(t);
    for (int64_t h = 0; h < H; ++h) {
      const float a = std::exp(w.a_log[h]);
      for (int64_t d = 0; d < D; ++d) {
        const float z = ft[h * D + d] + w.dt_bias[h * D + d];
        ft[h * D + d] = kc.gate_lower_bound ? static_cast<float>(*kc.gate_lower_bound) * sigmoid(a * z) : -a * softplus(z);
      }
      b.row(t)[h] = sigmoid(b.row(t)[h]);
    }
  }
  // The delta-rule core per (sequence, head), then the gated RMSNorm (spec §6.7).
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t jobs = static_cast<int64_t>(slices_.size()) * H;
#pragma omp parallel for schedule(dynamic)
  for (int64_t job = 0; job < jobs; ++job) {
    const SeqSlice& sl = slices_[static_cast<size_t>(job / H)];
    const int64_t h = job % H, n = sl.n;
    std::vector<float> hq(n * D), hk(n * D), hv(n * D), hg(n * D), hb(n), ho(n * D);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t r = sl.row0 + t;
      std::copy_n(s.q.row(r) + h * D, D, hq.data() + t * D);
      std::copy_n(s.k.row(r) + h * D, D, hk.data() + t * D);
      std::copy_n(s.v.row(r) + h * D, D, hv.data() + t * D);
      std::copy_n(f.row(r) + h * D, D, hg.data() + t * D);
      hb[t] = b.row(r)[h];
      l2_normalize(hq.data() + t * D, D, q_scale);
      l2_normalize(hk.data() + t * D, D, 1.0f);
    }
    float* S = sl.state->kda[static_cast<size_t>(layer)].recurrent.data() + h * D * D;
    const KdaHeadInputs in{n, D, hq.data(), hk.data(), hv.data(), hg.data(), hb.data()};
    if (n == 1) {
      kda_head_recurrent(in, S, ho.data());
    } else {
      kda_head_chunked(in, S, ho.data());
    }
    for (int64_t t = 0; t < n; ++t) {
      const float* o = ho.data() + t * D;
      float ss = 0;
      for (int64_t d = 0; d < D; ++d) ss += o[d] * o[d];
      const float r = 1.0f / std::sqrt(ss / static_cast<float>(D) + static_cast<float>(c_.rms_norm_eps));
      float* yr = s.y.row(sl.row0 + t) + h * D;
      const float* gr = s.g.row(sl.row0 + t) + h * D;
      for (int64_t d = 0; d < D; ++d) yr[d] = o[d] * r * w.o_norm[d] * sigmoid(gr[d]);
    }
  }
}

void kda_mixer(const K3Config& config, int64_t layer, const KdaWeights& w, const Tensor& x,
               std::span<const SeqSlice> slices, Tensor& out) {
  BlockOps ops(config, slices);
  kda_block(ops, layer, w, x, out);
}

}  // namespace k3::cpu
