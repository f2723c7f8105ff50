// The blocks of Kimi-Linear / Kimi-K3 (spec §5–§8), written once for every backend over coarse
// operations: the token mixers (KDA, MLA), the dense gated MLP and the (latent) MoE. Each block says
// which projections run in which order and which state is read or advanced; a backend supplies an
// `Ops` object that owns the step's buffers and runs the coarse operations in its own numerics
// (CPU: float32 activations; CUDA: bf16 activations, fp32 where the kernels keep it), fusing what
// it likes inside one operation. model/block_order.h puts these blocks in layer order.
//
// The Ops of a backend provide, with `Act` its activation type and `W` its weight handles:
//   scope()                              an object whose lifetime bounds the block's scratch
//   linear(w, x, y)                      y = x · wᵀ under the weight's scale contract
//   norm(x, weight, eps, y)              y = RMSNorm(x) per row
//   add(acc, x)                          acc += x
//   present(v)                           whether an optional vector weight (a norm) is there
//   kda_buffers(w, x)                    the KDA block's buffers (q_pre, k_pre, v_pre, f_low, f, b,
//                                        g_low, g and the normed output y), sized for x's rows
//   kda_short_conv(layer, w, s)          q, k, v from the pre-conv rows and each sequence's conv state
//   kda_attention(layer, w, s)           gates, the delta rule over each sequence's recurrent state
//                                        (chunked prefill or the decode step) and the gated RMSNorm → s.y
//   mla_buffers(w, x)                    the MLA block's buffers (qa, qa_normed, q, kv, gate, o)
//   mla_append_cache(layer, w, s)        [RMSNorm(c) | k_pe] of the new tokens onto each sequence's cache
//   mla_attention(layer, w, s)           causal attention of every new token over its sequence's cache,
//                                        the output gate applied → s.o
//   mlp_buffers(w, x)                    the gated MLP's buffers (a)
//   gated_projection(gate, up, x, a)     a = act(x·gateᵀ, x·upᵀ) (SiLU or SiTU) under the MoE scale
//                                        contract: each GEMM's dequant scales applied once, before act
//   moe_buffers(w, x, out)               the MoE block's buffers (logits, routing, z, routed, normed,
//                                        shared); `routed` may alias `out`
//   route(logits, bias, routing)         the router's picks and weights per token (spec §7.1)
//   routed_experts(layer, w, z, routing, routed)
//                                        Σ over each token's picks of weight · expert(z) (spec §7.2)
#pragma once

#include <cstdint>

#include "model/config.h"

namespace k3 {

// KDA token mixer (spec §6): projections, short conv with state, delta rule, gated RMSNorm, o_proj.
template <class Ops, class W, class X, class Out>
void kda_block(Ops& ops, int64_t layer, const W& w, const X& x, Out& out) {
  [[maybe_unused]] const auto scope = ops.scope();
  auto s = ops.kda_buffers(w, x);
  ops.linear(w.q, x, s.q_pre);
  ops.linear(w.k, x, s.k_pre);
  ops.linear(w.v, x, s.v_pre);
  ops.linear(w.f_a, x, s.f_low);
  ops.linear(w.f_b, s.f_low, s.f);
  ops.linear(w.b, x, s.b);
  if (w.g) {
    ops.linear(w.g, x, s.g);  // full-rank output gate (Kimi-K3)
  } else {
    ops.linear(w.g_a, x, s.g_low);  // low-rank output gate (Kimi-Linear)
    ops.linear(w.g_b, s.g_low, s.g);
  }
  ops.kda_short_conv(layer, w, s);
  ops.kda_attention(layer, w, s);
  ops.linear(w.o, s.y, out);
}

// MLA token mixer (spec §5, §10): q (q-LoRA or direct), the new latent rows into the cache,
// attention over the cache with the output gate, o_proj.
template <class Ops, class W, class X, class Out>
void mla_block(Ops& ops, const MlaConfig& m, int64_t layer, const W& w, const X& x, Out& out) {
  [[maybe_unused]] const auto scope = ops.scope();
  auto s = ops.mla_buffers(w, x);
  if (w.q_a) {
    ops.linear(w.q_a, x, s.qa);
    ops.norm(s.qa, w.q_a_norm, m.low_rank_norm_eps, s.qa_normed);
    ops.linear(w.q_b, s.qa_normed, s.q);
  } else {
    ops.linear(w.q, x, s.q);
  }
  ops.linear(w.kv_a, x, s.kv);
  ops.mla_append_cache(layer, w, s);
  if (w.g) ops.linear(w.g, x, s.gate);
  ops.mla_attention(layer, w, s);
  ops.linear(w.o, s.o, out);
}

// Dense gated MLP (spec §8), also a shared expert.
template <class Ops, class W, class X, class Out>
void mlp_block(Ops& ops, const W& w, const X& x, Out& out) {
  [[maybe_unused]] const auto scope = ops.scope();
  auto s = ops.mlp_buffers(w, x);
  ops.gated_projection(w.gate, w.up, x, s.a);
  ops.linear(w.down, s.a, out);
}

// MoE (spec §7): router, optional latent down-projection, the routed experts' weighted sum, latent
// norm and up-projection, plus the shared experts on the full-width input.
template <class Ops, class W, class X, class Out>
void moe_block(Ops& ops, double rms_norm_eps, int64_t layer, const W& w, const X& x, Out& out) {
  [[maybe_unused]] const auto scope = ops.scope();
  auto s = ops.moe_buffers(w, x, out);
  ops.linear(w.router, x, s.logits);
  ops.route(s.logits, w.correction_bias, s.routing);
  if (w.latent_down) ops.linear(w.latent_down, x, s.z);
  ops.routed_experts(layer, w, w.latent_down ? s.z : x, s.routing, s.routed);
  // The shared experts do not read the routed sum: issued before it is complete, they overlap the
  // part of it a backend finishes elsewhere (the CUDA backend's CPU experts).
  if (w.shared.gate) mlp_block(ops, w.shared, x, s.shared);
  ops.complete_routed(s.routed);
  if (w.latent_up) {
    if (ops.present(w.latent_norm)) {
      ops.norm(s.routed, w.latent_norm, rms_norm_eps, s.normed);
      ops.linear(w.latent_up, s.normed, out);
    } else {
      ops.linear(w.latent_up, s.routed, out);
    }
  }
  if (w.shared.gate) ops.add(out, s.shared);
}

}  // namespace k3
