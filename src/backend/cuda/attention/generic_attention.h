// Token-mixer kernels for any head geometry (generic_attention.cu): the fallback the CUDA model uses
// when a checkpoint's KDA head dim or MLA dims are not the ones the fast kernels are built for
// (kda.h: D = 128; mla.h: 128/64/128/512) — small research and test models such as the transformers
// peer fixture. Straightforward and exact in fp32, not fast: KDA one CTA per (sequence, head),
// tokens in order; MLA one CTA per (16-query tile, head, sequence). The CPU references are
// cpu::kda_mixer and cpu::mla_mixer's expanded attention.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

inline constexpr int kGenericMaxHeadDim = 128;  // KDA D and each MLA per-head width ≤ this

// The KDA delta rule token by token (spec §6.3–§6.5) for every sequence of `batch` (cu_seqlens may
// be nullptr: one row per sequence), from and into the slot's recurrent state (pool.head_dim = D ≤
// 128, any H): per token, gates from f (raw logits) and b (raw β logits) as kda_decode, q and k
// L2-normalised (q also scaled by D^-½), S ← diag(α)S; u = β(v − Sᵀk); S += k uᵀ; o = Sᵀq.
// q, k, v, f: [rows, H·D] f32 or bf16 (column views fine); b: [rows, H]; o: [rows, H·D] f32 or bf16.
void kda_recurrent_generic(const KdaBatch& batch, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                           const DeviceTensor& f, const DeviceTensor& b, const KdaGate& gate, const KdaStatePool& pool,
                           const DeviceTensor& o, cudaStream_t stream);

// Gated RMSNorm per head of `head_dim` (≤ 128): y = o·r·w·sigmoid(g), r = 1/sqrt(mean(o²) + eps).
// o, g: [rows, H·head_dim] f32 or bf16 (each); w: f32 [head_dim]; y: [rows, H·head_dim] f32 or bf16.
void kda_gated_rms_norm_generic(const DeviceTensor& o, const DeviceTensor& g, const float* w, int head_dim, float eps,
                                const DeviceTensor& y, cudaStream_t stream);

// MLA head geometry of the generic attention.
struct MlaDims {
  int heads = 0, nope = 0, rope = 0, v = 0;
};

// Causal NoPE attention with the output gate, as mla_prefill_attention but any dims (each ≤ 128):
// per sequence s, queries cu_q[s]…cu_q[s+1] are the LAST q_len of the keys cu_kv[s]…cu_kv[s+1]; key
// j visible to query i iff j ≤ kv_len − q_len + i.
//   q: [Tq, H·(nope+rope)] per head [q_nope | q_pe]; kv: [Tkv, H·(nope+v)] per head [k_nope | v];
//   k_pe: [Tkv, rope] shared by the heads; gate: [Tq, H·v] raw logits (data == nullptr: none);
//   out: [Tq, H·v]. q, kv, k_pe one dtype, f32 or bf16; gate and out each f32 or bf16; fp32 math;
//   softmax with `scale`. rope may be 0 (k_pe then [Tkv, 0], never read).
void mla_attention_generic(const int32_t* cu_q, const int32_t* cu_kv, int n, int max_q_len, const MlaDims& dims,
                           const DeviceTensor& q, const DeviceTensor& kv, const DeviceTensor& k_pe,
                           const DeviceTensor& gate, float scale, const DeviceTensor& out, cudaStream_t stream);

}  // namespace k3::cuda
