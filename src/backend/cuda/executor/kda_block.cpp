// KDA token mixer on the GPU (spec §6), the CUDA form of cpu::kda_mixer: projections, short conv with
// state, then the chunked prefill (+ gated RMSNorm) or, when every sequence runs one token, the fused
// decode step; o_proj. Head dims other than the fast kernels' 128 run the generic kernels.
#include "backend/cuda/attention/generic_attention.h"
#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/executor/step.h"

namespace k3::cuda {

void kda_block(StepContext& ctx, int64_t layer, const DeviceKda& w, const DeviceTensor& x, const DeviceTensor& out) {
  const KdaConfig& kc = ctx.config.kda;
  const StepMeta& m = ctx.meta;
  const int64_t T = x.rows, H = kc.num_heads, P = kc.projection_dim();
  const KdaStatePool& pool = ctx.state[static_cast<size_t>(layer)].kda;
  const size_t mark = ctx.arena.mark();

  // q~ | k~ | v~ side by side: the conv's input layout.
  const DeviceTensor qkv_pre = ctx.scratch(DType::kBF16, T, 3 * P, "kda q|k|v pre-conv");
  ctx.linear(w.q, x, qkv_pre.col_slice(0, P));
  ctx.linear(w.k, x, qkv_pre.col_slice(P, P));
  ctx.linear(w.v, x, qkv_pre.col_slice(2 * P, P));
  const DeviceTensor f_low = ctx.scratch(DType::kBF16, T, w.f_a.n, "kda f_a out");
  const DeviceTensor f = ctx.scratch(DType::kF32, T, P, "kda forget logits");
  ctx.linear(w.f_a, x, f_low);
  ctx.linear(w.f_b, f_low, f);
  const DeviceTensor b = ctx.scratch(DType::kF32, T, H, "kda beta logits");
  ctx.linear(w.b, x, b);
  const DeviceTensor g = ctx.scratch(DType::kF32, T, P, "kda output gate logits");
  if (w.g) {
    ctx.linear(w.g, x, g);
  } else {
    const DeviceTensor g_low = ctx.scratch(DType::kBF16, T, w.g_a.n, "kda g_a out");
    ctx.linear(w.g_a, x, g_low);
    ctx.linear(w.g_b, g_low, g);
  }

  KdaBatch batch;
  batch.cu_seqlens = m.decode ? nullptr : m.cu_q;
  batch.slots = m.slots;
  batch.n = m.n;
  batch.max_len = m.max_q;
  batch.total_rows = T;
  // The delta-rule kernels take q, k, v, f and b in one dtype: f32 (the gates' logits keep full precision).
  const DeviceTensor qkv = ctx.scratch(DType::kF32, T, 3 * P, "kda q|k|v");
  kda_short_conv(batch, qkv_pre, w.conv, pool, qkv, ctx.stream);
  const DeviceTensor q = qkv.col_slice(0, P), k = qkv.col_slice(P, P), v = qkv.col_slice(2 * P, P);

  KdaGate gate;
  gate.safe = kc.gate_lower_bound.has_value();
  gate.lower_bound = gate.safe ? static_cast<float>(*kc.gate_lower_bound) : 0.0f;
  gate.a_log = w.a_log;
  gate.dt_bias = w.dt_bias;
  const float eps = static_cast<float>(ctx.config.rms_norm_eps);
  const DeviceTensor y = ctx.scratch(DType::kBF16, T, P, "kda normed output");
  if (kc.head_dim != kKdaHeadDim) {
    // Other head dims: the generic token-by-token kernels (generic_attention.h).
    const DeviceTensor o = ctx.scratch(DType::kF32, T, P, "kda delta-rule output");
    kda_recurrent_generic(batch, q, k, v, f, b, gate, pool, o, ctx.stream);
    kda_gated_rms_norm_generic(o, g, w.o_norm, static_cast<int>(kc.head_dim), eps, y, ctx.stream);
  } else if (m.decode) {
    kda_decode(batch, q, k, v, f, b, gate, pool, w.o_norm, g, eps, y, ctx.stream);
  } else {
    void* workspace = ctx.arena.alloc(kda_prefill_workspace_bytes(batch, H), "kda prefill workspace");
    const DeviceTensor o = ctx.scratch(DType::kF32, T, P, "kda delta-rule output");
    kda_prefill(batch, q, k, v, f, b, gate, pool, workspace, o, ctx.stream);
    kda_gated_rms_norm(o, g, w.o_norm, eps, y, ctx.stream);
  }
  ctx.linear(w.o, y, out);
  ctx.arena.reset(mark);
}

}  // namespace k3::cuda
