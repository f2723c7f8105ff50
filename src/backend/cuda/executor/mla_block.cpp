// MLA on the GPU (spec §5, §10): the operations model/blocks.h mla_block composes with the
// projections — [RMSNorm(c) | k_pe] appended to each sequence's latent cache, then either the
// expanded causal attention over every sequence's whole context (kv_b applied to the gathered latent
// rows; any step with a multi-token sequence) or, when every sequence runs one token, the absorbed
// decode attention over the paged latent cache; the output gate inside the attention kernels.
// Geometries other than the fast kernels' (mla.h) always take the expanded path with the generic
// attention kernel.
#include "backend/cuda/attention/generic_attention.h"
#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/executor/block_ops.h"
#include "backend/cuda/executor/cuda_format.h"
#include "model/blocks.h"

namespace k3::cuda {

bool mla_fast_geometry(const MlaConfig& m) {
  return m.qk_nope_head_dim == kMlaNope && m.qk_rope_head_dim == kMlaRope && m.v_head_dim == kMlaV &&
         m.kv_lora_rank == kMlaRank;
}

MlaBuffers BlockOps::mla_buffers(const DeviceMla& w, const DeviceTensor& x) const {
  const MlaConfig& mc = ctx_.config.mla;
  const int64_t T = x.rows, H = mc.num_heads, row = mc.kv_lora_rank + mc.qk_rope_head_dim;
  ctx_.input_forms.share(x);
  MlaBuffers s;
  s.q = scratch(DType::kBF16, T, H * (mc.qk_nope_head_dim + mc.qk_rope_head_dim), "mla q");
  if (w.q_a) {
    s.qa = scratch(DType::kF32, T, w.q_a.n, "mla q_a out");
    s.qa_normed = scratch(DType::kBF16, T, w.q_a.n, "mla q_a normed");
  }
  s.kv = scratch(DType::kF32, T, row, "mla kv_a out");
  if (w.g) s.gate = scratch(DType::kBF16, T, H * mc.v_head_dim, "mla output gate logits");
  s.o = scratch(DType::kBF16, T, H * mc.v_head_dim, "mla attention output");
  return s;
}

void BlockOps::mla_append_cache(int64_t layer, const DeviceMla& w, MlaBuffers& s) const {
  const MlaConfig& mc = ctx_.config.mla;
  const int64_t T = s.kv.rows, r = mc.kv_lora_rank, rope = mc.qk_rope_head_dim;
  const DeviceTensor& cache = ctx_.state[static_cast<size_t>(layer)].cache;
  // The new cache rows: c normed (f32 in, bf16 out) next to the raw k_pe, then scattered to the cache.
  const DeviceTensor rows = scratch(DType::kBF16, T, r + rope, "mla new cache rows");
  rms_norm(s.kv.col_slice(0, r), w.kv_a_norm, static_cast<float>(mc.low_rank_norm_eps), rows.col_slice(0, r), ctx_.stream);
  if (rope > 0) copy_rows(s.kv.col_slice(r, rope), nullptr, rows.col_slice(r, rope), nullptr, T, ctx_.stream);
  copy_rows(rows, nullptr, cache, ctx_.meta.cache_dst, T, ctx_.stream);
}

void BlockOps::mla_attention(int64_t layer, const DeviceMla& w, MlaBuffers& s) const {
  const MlaConfig& mc = ctx_.config.mla;
  const StepMeta& m = ctx_.meta;
  const int64_t T = s.q.rows, H = mc.num_heads, r = mc.kv_lora_rank, rope = mc.qk_rope_head_dim;
  const int64_t nope = mc.qk_nope_head_dim, dv = mc.v_head_dim, row = r + rope;
  const DeviceTensor& cache = ctx_.state[static_cast<size_t>(layer)].cache;
  const bool fast = mla_fast_geometry(mc);
  const float scale = static_cast<float>(mc.softmax_scale());
  if (fast && m.decode) {
    const DeviceTensor q_abs = scratch(DType::kBF16, T, H * kMlaRow, "mla absorbed q");
    if (w.absorbed.packed) {
      w.absorbed.packed->absorb_q(s.q, q_abs, ctx_.stream);
    } else {
      mla_absorb_q(s.q, w.absorbed.w_uk, q_abs, ctx_.stream);
    }
    const MlaPagedCache paged{cache.data, cache.rows, ctx_.page_size, m.block_table, m.block_table_ld};
    const MlaDecodePlan plan = mla_decode_plan(m.n, static_cast<int>(H), m.max_kv, ctx_.multiprocessors, ctx_.mla_decode);
    void* workspace = ctx_.arena.alloc(mla_decode_workspace_bytes(plan, m.n, static_cast<int>(H)), "mla decode workspace");
    const DeviceTensor o_lat = scratch(DType::kF32, T, H * kMlaRank, "mla latent output");
    mla_decode_attention(q_abs, paged, m.seqlens, m.n, scale, plan, workspace, o_lat, ctx_.stream);
    if (w.absorbed.packed) {
      w.absorbed.packed->unabsorb_o(o_lat, s.gate, s.o, ctx_.stream);
    } else {
      mla_unabsorb_o(o_lat, w.absorbed.w_uv, s.gate, s.o, ctx_.stream);
    }
  } else {
    const DeviceTensor latent = scratch(DType::kBF16, m.kv_rows, row, "mla gathered latent rows");
    copy_rows(cache, m.kv_src, latent, nullptr, m.kv_rows, ctx_.stream);
    const DeviceTensor kvb = scratch(DType::kBF16, m.kv_rows, H * (nope + dv), "mla kv_b out");
    ctx_.linear(w.kv_b, latent.col_slice(0, r), kvb);
    const DeviceTensor k_pe = latent.col_slice(r, rope);
    if (fast) {
      mla_prefill_attention(m.cu_q, m.cu_kv, m.n, m.max_q, s.q, kvb, k_pe, s.gate, scale, s.o, ctx_.stream);
    } else {
      const MlaDims dims{static_cast<int>(H), static_cast<int>(nope), static_cast<int>(rope), static_cast<int>(dv)};
      mla_attention_generic(m.cu_q, m.cu_kv, m.n, m.max_q, dims, s.q, kvb, k_pe, s.gate, scale, s.o, ctx_.stream);
    }
  }
}

void mla_block(StepContext& ctx, int64_t layer, const DeviceMla& w, const DeviceTensor& x, const DeviceTensor& out) {
  BlockOps ops(ctx);
  k3::mla_block(ops, ctx.config.mla, layer, w, x, out);
}

}  // namespace k3::cuda
