// MLA token mixer on the GPU (spec §5, §10), the CUDA form of cpu::mla_mixer: q (q-LoRA or direct),
// kv_a → [RMSNorm(c) | k_pe] appended to each sequence's latent cache, then either the expanded
// causal attention over every sequence's whole context (kv_b applied to the gathered latent rows;
// any step with a multi-token sequence) or, when every sequence runs one token, the absorbed decode
// attention over the paged latent cache; output gate, o_proj. Geometries other than the fast
// kernels' (mla.h) always take the expanded path with the generic attention kernel.
#include "backend/cuda/attention/generic_attention.h"
#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/executor/rows.h"
#include "backend/cuda/executor/step.h"
#include "backend/cuda/ops/ops.h"

namespace k3::cuda {

bool mla_fast_geometry(const MlaConfig& m) {
  return m.qk_nope_head_dim == kMlaNope && m.qk_rope_head_dim == kMlaRope && m.v_head_dim == kMlaV &&
         m.kv_lora_rank == kMlaRank;
}

void mla_block(StepContext& ctx, int64_t layer, const DeviceMla& w, const DeviceTensor& x, const DeviceTensor& out) {
  const MlaConfig& mc = ctx.config.mla;
  const StepMeta& m = ctx.meta;
  const int64_t T = x.rows, H = mc.num_heads, r = mc.kv_lora_rank, rope = mc.qk_rope_head_dim;
  const int64_t nope = mc.qk_nope_head_dim, dv = mc.v_head_dim, row = r + rope;
  const bool fast = mla_fast_geometry(mc);
  const float low_rank_eps = static_cast<float>(mc.low_rank_norm_eps);
  const DeviceTensor& cache = ctx.state[static_cast<size_t>(layer)].cache;
  const size_t mark = ctx.arena.mark();

  const DeviceTensor q = ctx.scratch(DType::kBF16, T, H * (nope + rope), "mla q");
  if (w.q_a) {
    const DeviceTensor qa = ctx.scratch(DType::kF32, T, w.q_a.n, "mla q_a out");
    const DeviceTensor qa_normed = ctx.scratch(DType::kBF16, T, w.q_a.n, "mla q_a normed");
    ctx.linear(w.q_a, x, qa);
    rms_norm(qa, w.q_a_norm, low_rank_eps, qa_normed, ctx.stream);
    ctx.linear(w.q_b, qa_normed, q);
  } else {
    ctx.linear(w.q, x, q);
  }
  // The new cache rows: c normed (f32 in, bf16 out) next to the raw k_pe, then scattered to the cache.
  const DeviceTensor kv = ctx.scratch(DType::kF32, T, row, "mla kv_a out");
  ctx.linear(w.kv_a, x, kv);
  const DeviceTensor rows = ctx.scratch(DType::kBF16, T, row, "mla new cache rows");
  rms_norm(kv.col_slice(0, r), w.kv_a_norm, low_rank_eps, rows.col_slice(0, r), ctx.stream);
  if (rope > 0) copy_rows(kv.col_slice(r, rope), nullptr, rows.col_slice(r, rope), nullptr, T, ctx.stream);
  copy_rows(rows, nullptr, cache, m.cache_dst, T, ctx.stream);

  DeviceTensor gate;
  if (w.g) {
    gate = ctx.scratch(DType::kBF16, T, H * dv, "mla output gate logits");
    ctx.linear(w.g, x, gate);
  }
  const float scale = static_cast<float>(mc.softmax_scale());
  const DeviceTensor o = ctx.scratch(DType::kBF16, T, H * dv, "mla attention output");
  if (fast && m.decode) {
    const DeviceTensor q_abs = ctx.scratch(DType::kBF16, T, H * kMlaRow, "mla absorbed q");
    if (w.k_b.data != nullptr) {
      mla_absorb_q_ggml(q, w.k_b, q_abs, ctx.stream);
    } else {
      mla_absorb_q(q, w.w_uk, q_abs, ctx.stream);
    }
    const MlaPagedCache paged{cache.data, ctx.page_size, m.block_table, m.block_table_ld};
    const int splits = mla_decode_splits(m.n, static_cast<int>(H), m.max_kv, ctx.multiprocessors);
    void* workspace = ctx.arena.alloc(mla_decode_workspace_bytes(m.n, static_cast<int>(H), splits), "mla decode workspace");
    const DeviceTensor o_lat = ctx.scratch(DType::kF32, T, H * kMlaRank, "mla latent output");
    mla_decode_attention(q_abs, paged, m.seqlens, m.n, m.max_kv, scale, splits, workspace, o_lat, ctx.stream);
    if (w.v_b.data != nullptr) {
      mla_unabsorb_o_ggml(o_lat, w.v_b, gate, o, ctx.stream);
    } else {
      mla_unabsorb_o(o_lat, w.w_uv, gate, o, ctx.stream);
    }
  } else {
    const DeviceTensor latent = ctx.scratch(DType::kBF16, m.kv_rows, row, "mla gathered latent rows");
    copy_rows(cache, m.kv_src, latent, nullptr, m.kv_rows, ctx.stream);
    const DeviceTensor kvb = ctx.scratch(DType::kBF16, m.kv_rows, H * (nope + dv), "mla kv_b out");
    ctx.linear(w.kv_b, latent.col_slice(0, r), kvb);
    const DeviceTensor k_pe = latent.col_slice(r, rope);
    if (fast) {
      mla_prefill_attention(m.cu_q, m.cu_kv, m.n, m.max_q, q, kvb, k_pe, gate, scale, o, ctx.stream);
    } else {
      const MlaDims dims{static_cast<int>(H), static_cast<int>(nope), static_cast<int>(rope), static_cast<int>(dv)};
      mla_attention_generic(m.cu_q, m.cu_kv, m.n, m.max_q, dims, q, kvb, k_pe, gate, scale, o, ctx.stream);
    }
  }
  ctx.linear(w.o, o, out);
  ctx.arena.reset(mark);
}

}  // namespace k3::cuda
