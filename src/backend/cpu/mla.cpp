// MLA on the CPU (spec §5, §10), the operations model/blocks.h mla_block composes with the
// projections: kv_a norm into the latent cache, NoPE causal softmax, output gate. New tokens append
// [c | k_pe] to the sequence's pages of the paged latent cache (model/state.h LatentPages), which
// attention reads in place through the block table; a multi-token slice attends in the expanded
// form (kv_b applied to every cached latent), a one-token slice in the absorbed form against the
// latent cache (q_lat = W_UKᵀ q_nope, o = W_UV Σ p c).
#include <cmath>

#include "backend/cpu/block_ops.h"
#include "model/blocks.h"

namespace k3::cpu {
namespace {

void softmax_inplace(float* s, int64_t n) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
  for (int64_t j = 0; j < n; ++j) s[j] /= sum;
}

struct Dims {
  int64_t nh, dn, dr, dv, dqk, r;
  explicit Dims(const MlaConfig& m)
      : nh(m.num_heads), dn(m.qk_nope_head_dim), dr(m.qk_rope_head_dim), dv(m.v_head_dim), dqk(m.qk_head_dim()),
        r(m.kv_lora_rank) {}
};

// The cache rows of `layer` for one sequence whose new tokens are already appended: `total` of them.
struct CacheView {
  const LatentPages& pages;
  const std::vector<int32_t>& table;
  int64_t layer, total;
  const float* row(int64_t j) const { return pages.row(table, layer, j); }
};

CacheView cache_of(const SeqSlice& s, int64_t layer) {
  return {*s.state->latent, s.state->blocks, layer, s.state->length + s.n};
}

// Expanded causal attention for slice rows whose cache holds `total` tokens, the last s.n new.
void attend_expanded(const MlaWeights& w, const Dims& d, float scale, const Tensor& q, const CacheView& cache,
                     const SeqSlice& s, Tensor& o) {
  const int64_t total = cache.total;
  Tensor latent(total, d.r), kvb;  // kv_b's input: the cached latents
  for (int64_t j = 0; j < total; ++j) std::copy_n(cache.row(j), d.r, latent.row(j));
  linear(*w.kv_b, latent, kvb);  // [total][nh·(dn+dv)]
  const int64_t first = total - s.n;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t h = 0; h < d.nh; ++h) {
    for (int64_t i = 0; i < s.n; ++i) {
      const float* qi = q.row(s.row0 + i) + h * d.dqk;
      const int64_t visible = first + i + 1;
      std::vector<float> p(static_cast<size_t>(visible));
      for (int64_t j = 0; j < visible; ++j) {
        const float* kj = kvb.row(j) + h * (d.dn + d.dv);
        const float* pe = cache.row(j) + d.r;
        float acc = 0;
        for (int64_t e = 0; e < d.dn; ++e) acc += qi[e] * kj[e];
        for (int64_t e = 0; e < d.dr; ++e) acc += qi[d.dn + e] * pe[e];
        p[j] = acc * scale;
      }
      softmax_inplace(p.data(), visible);
      float* oi = o.row(s.row0 + i) + h * d.dv;
      for (int64_t e = 0; e < d.dv; ++e) oi[e] = 0;
      for (int64_t j = 0; j < visible; ++j) {
        const float* vj = kvb.row(j) + h * (d.dn + d.dv) + d.dn;
        for (int64_t e = 0; e < d.dv; ++e) oi[e] += p[j] * vj[e];
      }
    }
  }
}

// Absorbed attention of the slice's single new token against the whole latent cache.
void attend_absorbed(const MlaWeights& w, const Dims& d, float scale, const Tensor& q, const CacheView& cache,
                     const SeqSlice& s, Tensor& o) {
  const int64_t total = cache.total;
#pragma omp parallel for schedule(static)
  for (int64_t h = 0; h < d.nh; ++h) {
    const float* qh = q.row(s.row0) + h * d.dqk;
    const float* uk = w.absorbed.w_uk.data() + h * d.dn * d.r;  // [dn][r]
    const float* uv = w.absorbed.w_uv.data() + h * d.dv * d.r;  // [dv][r]
    std::vector<float> q_lat(static_cast<size_t>(d.r), 0.0f), o_lat(static_cast<size_t>(d.r), 0.0f),
        p(static_cast<size_t>(total));
    for (int64_t e = 0; e < d.dn; ++e) {
      for (int64_t c = 0; c < d.r; ++c) q_lat[c] += uk[e * d.r + c] * qh[e];
    }
    for (int64_t j = 0; j < total; ++j) {
      const float* row = cache.row(j);
      float acc = 0;
      for (int64_t c = 0; c < d.r; ++c) acc += q_lat[c] * row[c];
      for (int64_t e = 0; e < d.dr; ++e) acc += qh[d.dn + e] * row[d.r + e];
      p[j] = acc * scale;
    }
    softmax_inplace(p.data(), total);
    for (int64_t j = 0; j < total; ++j) {
      const float* row = cache.row(j);
      for (int64_t c = 0; c < d.r; ++c) o_lat[c] += p[j] * row[c];
    }
    float* oh = o.row(s.row0) + h * d.dv;
    for (int64_t e = 0; e < d.dv; ++e) {
      float acc = 0;
      for (int64_t c = 0; c < d.r; ++c) acc += uv[e * d.r + c] * o_lat[c];
      oh[e] = acc;
    }
  }
}

}  // namespace

MlaBuffers BlockOps::mla_buffers(const MlaWeights&, const Tensor& x) const {
  const Dims d(c_.mla);
  MlaBuffers s;
  s.o = Tensor(x.rows, d.nh * d.dv);
  return s;
}

void BlockOps::mla_append_cache(int64_t layer, const MlaWeights& w, MlaBuffers& s) const {
  const MlaConfig& m = c_.mla;
  const Dims d(m);
  const Tensor& kv = s.kv;
  Tensor c_raw(kv.rows, d.r), latent;
  for (int64_t t = 0; t < kv.rows; ++t) std::copy_n(kv.row(t), d.r, c_raw.row(t));
  rms_norm(c_raw, w.kv_a_norm, m.low_rank_norm_eps, latent);
  for (const SeqSlice& sl : slices_) {
    LatentPages& pages = *sl.state->latent;
    for (int64_t t = 0; t < sl.n; ++t) {
      float* row = pages.row(sl.state->blocks, layer, sl.state->length + t);
      std::copy_n(latent.row(sl.row0 + t), d.r, row);
      std::copy_n(kv.row(sl.row0 + t) + d.r, d.dr, row + d.r);
    }
  }
}

void BlockOps::mla_attention(int64_t layer, const MlaWeights& w, MlaBuffers& s) const {
  const MlaConfig& m = c_.mla;
  const Dims d(m);
  const float scale = static_cast<float>(m.softmax_scale());
  Tensor& o = s.o;
  for (const SeqSlice& sl : slices_) {
    const CacheView cache = cache_of(sl, layer);
    if (sl.n == 1) {
      attend_absorbed(w, d, scale, s.q, cache, sl, o);
    } else {
      attend_expanded(w, d, scale, s.q, cache, sl, o);
    }
  }
  if (w.g) {
    const Tensor& g = s.gate;
#pragma omp parallel for schedule(static) if (o.data.size() >= kParallelMinElements)
    for (int64_t i = 0; i < static_cast<int64_t>(o.data.size()); ++i) o.data[i] *= sigmoid(g.data[i]);
  }
}

void mla_mixer(const K3Config& config, int64_t layer, const MlaWeights& w, const Tensor& x,
               std::span<const SeqSlice> slices, Tensor& out) {
  BlockOps ops(config, slices);
  mla_block(ops, config.mla, layer, w, x, out);
}

}  // namespace k3::cpu
