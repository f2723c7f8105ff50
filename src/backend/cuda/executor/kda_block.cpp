// KDA on the GPU (spec §6): the operations model/blocks.h kda_block composes with the projections —
// the short conv with each slot's conv state, then the chunked prefill (+ gated RMSNorm) or, when
// every sequence runs one token, the fused decode step. Head dims other than the fast kernels' 128
// run the generic kernels.
#include "backend/cuda/attention/generic_attention.h"
#include "backend/cuda/executor/block_ops.h"
#include "model/blocks.h"

namespace k3::cuda {

KdaBuffers BlockOps::kda_buffers(const DeviceKda& w, const DeviceTensor& x) const {
  const KdaConfig& kc = ctx_.config.kda;
  const StepMeta& m = ctx_.meta;
  const int64_t T = x.rows, H = kc.num_heads, P = kc.projection_dim();
  ctx_.input_forms.share(x);
  KdaBuffers s;
  // q~ | k~ | v~ side by side: the conv's input layout.
  s.qkv_pre = scratch(DType::kBF16, T, 3 * P, "kda q|k|v pre-conv");
  s.q_pre = s.qkv_pre.col_slice(0, P);
  s.k_pre = s.qkv_pre.col_slice(P, P);
  s.v_pre = s.qkv_pre.col_slice(2 * P, P);
  s.f_low = scratch(DType::kBF16, T, w.f_a.n, "kda f_a out");
  s.f = scratch(DType::kF32, T, P, "kda forget logits");
  s.b = scratch(DType::kF32, T, H, "kda beta logits");
  s.g = scratch(DType::kF32, T, P, "kda output gate logits");
  if (!w.g) s.g_low = scratch(DType::kBF16, T, w.g_a.n, "kda g_a out");
  // The delta-rule kernels take q, k, v, f and b in one dtype: f32 (the gates' logits keep full precision).
  s.qkv = scratch(DType::kF32, T, 3 * P, "kda q|k|v");
  s.q = s.qkv.col_slice(0, P);
  s.k = s.qkv.col_slice(P, P);
  s.v = s.qkv.col_slice(2 * P, P);
  s.y = scratch(DType::kBF16, T, P, "kda normed output");
  s.batch.cu_seqlens = m.decode ? nullptr : m.cu_q;
  s.batch.slots = m.slots;
  s.batch.n = m.n;
  s.batch.max_len = m.max_q;
  s.batch.total_rows = T;
  return s;
}

void BlockOps::kda_short_conv(int64_t layer, const DeviceKda& w, KdaBuffers& s) const {
  const KdaStatePool& pool = ctx_.state[static_cast<size_t>(layer)].kda;
  cuda::kda_short_conv(s.batch, s.qkv_pre, w.conv, pool, s.qkv, ctx_.stream);
}

void BlockOps::kda_attention(int64_t layer, const DeviceKda& w, KdaBuffers& s) const {
  const KdaConfig& kc = ctx_.config.kda;
  const KdaStatePool& pool = ctx_.state[static_cast<size_t>(layer)].kda;
  const int64_t T = s.q.rows, H = kc.num_heads, P = kc.projection_dim();
  KdaGate gate;
  gate.safe = kc.gate_lower_bound.has_value();
  gate.lower_bound = gate.safe ? static_cast<float>(*kc.gate_lower_bound) : 0.0f;
  gate.a_log = w.a_log;
  gate.dt_bias = w.dt_bias;
  const float eps = static_cast<float>(ctx_.config.rms_norm_eps);
  if (kc.head_dim != kKdaHeadDim) {
    // Other head dims: the generic token-by-token kernels (generic_attention.h).
    const DeviceTensor o = scratch(DType::kF32, T, P, "kda delta-rule output");
    kda_recurrent_generic(s.batch, s.q, s.k, s.v, s.f, s.b, gate, pool, o, ctx_.stream);
    kda_gated_rms_norm_generic(o, s.g, w.o_norm, static_cast<int>(kc.head_dim), eps, s.y, ctx_.stream);
  } else if (ctx_.meta.decode) {
    kda_decode(s.batch, s.q, s.k, s.v, s.f, s.b, gate, pool, w.o_norm, s.g, eps, s.y, ctx_.stream);
  } else {
    void* workspace = ctx_.arena.alloc(kda_prefill_workspace_bytes(s.batch, H), "kda prefill workspace");
    const DeviceTensor o = scratch(DType::kF32, T, P, "kda delta-rule output");
    kda_prefill(s.batch, s.q, s.k, s.v, s.f, s.b, gate, pool, workspace, o, ctx_.stream);
    kda_gated_rms_norm(o, s.g, w.o_norm, eps, s.y, ctx_.stream);
  }
}

void kda_block(StepContext& ctx, int64_t layer, const DeviceKda& w, const DeviceTensor& x, const DeviceTensor& out) {
  BlockOps ops(ctx);
  k3::kda_block(ops, layer, w, x, out);
}

}  // namespace k3::cuda
