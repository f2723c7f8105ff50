// KDA (Kimi Delta Attention, spec §6) on the GPU: the short causal conv, the chunked prefill and the
// fused decode step of the gated delta rule, the gated RMSNorm, and state slots. The CPU reference is
// cpu::kda_mixer (backend/cpu/kda.cpp); these kernels compute the same function from the projection
// outputs onwards (the projections are GEMMs of the caller).
//
// Batches are packed rows, sequence after sequence. A sequence's state lives in a slot of a state
// pool; each call names the slot per sequence (device int32 array) and continues from it:
//   prefill:  kda_short_conv(x=q~|k~|v~) → kda_prefill(q,k,v,f~,b~) → kda_gated_rms_norm(o, g~)
//   decode:   kda_short_conv(one row per sequence) → kda_decode(…, fused gated RMSNorm)
// A new sequence starts from a zeroed slot (kda_state_zero); a cached prefix is restored by copying
// a saved slot (kda_state_copy) at the exact token boundary.
//
// The head dim D is 128 (Kimi-K3 and Kimi-Linear); other values are refused. All math is fp32.
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

inline constexpr int kKdaHeadDim = 128;
inline constexpr int kKdaChunk = 64;   // chunk of the prefill form (spec §6.6)
inline constexpr int kKdaMaxConvWidth = 8;

// Packed sequences of one call. cu_seqlens: device int32 [n + 1] row starts (cu[0] = 0); nullptr
// means one row per sequence (decode). slots: device int32 [n], the state-pool slot per sequence.
// max_len: host-side upper bound of the sequence lengths (grid size).
struct KdaBatch {
  const int32_t* cu_seqlens = nullptr;
  const int32_t* slots = nullptr;
  int n = 0;
  int max_len = 0;
  int64_t total_rows = 0;  // rows of the packed activations (== cu_seqlens[n])
};

// Per-sequence state of one KDA layer, for `slots` sequences, as the CPU's KdaLayerState:
//   recurrent: f32 [slots][H][D][D], S[h][k][v] (V contiguous; spec §10 notes sglang's [V][K])
//   conv:      f32 [slots][3][W−1][P], the last W−1 pre-conv inputs of q, k and v, oldest first
struct KdaStatePool {
  float* recurrent = nullptr;
  float* conv = nullptr;
  int64_t slots = 0, heads = 0, head_dim = kKdaHeadDim, conv_width = 4;

  int64_t proj_dim() const { return heads * head_dim; }
  size_t recurrent_floats_per_slot() const { return static_cast<size_t>(heads * head_dim * head_dim); }
  size_t conv_floats_per_slot() const { return static_cast<size_t>(3 * (conv_width - 1) * proj_dim()); }
};

// The forget gate (spec §6.3), per channel c = h·D + d with z = f~[c] + dt_bias[c], a = exp(A_log[h]):
//   safe (K3):            g = lower_bound · sigmoid(a·z)
//   softplus (Kimi-Linear): g = −a · softplus(z)   (softplus threshold 20)
struct KdaGate {
  bool safe = true;
  float lower_bound = -5.0f;
  const float* a_log = nullptr;    // device f32 [H]
  const float* dt_bias = nullptr;  // device f32 [P]
};

// Causal depthwise conv + SiLU (spec §6.2) over channels c of x [rows, C] (f32 or bf16; C = 3P for
// q~|k~|v~), with weight f32 [C][W] (w[c][W−1] multiplies the current token), continuing from and
// advancing the slot's conv state (state index of channel c = (c / P)·(W−1)·P + j·P + c % P).
// y: [rows, C], f32 or bf16. C % 8 == 0.
void kda_short_conv(const KdaBatch& batch, const DeviceTensor& x, const float* weight, const KdaStatePool& pool,
                    const DeviceTensor& y, cudaStream_t stream);

// Chunked prefill (spec §6.3–§6.6) of every sequence of `batch` from its slot's recurrent state,
// which is advanced in place. q, k, v: [rows, P] post-conv (f32 or bf16; may be column slices of
// one buffer); f: raw forget-gate logits f_b(f_a(x)) [rows, P]; b: raw β logits [rows, H] (f32 or
// bf16). o: the delta-rule output before the gated norm, [rows, P], f32 or bf16. q and k are
// L2-normalised here (q also scaled by D^-½). Workspace: kda_prefill_workspace_bytes(batch, H).
// The inter-chunk pass's tile loads and state columns per CTA follow the shapes
// (kda_tuning.h).
size_t kda_prefill_workspace_bytes(const KdaBatch& batch, int64_t heads);
void kda_prefill(const KdaBatch& batch, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                 const DeviceTensor& f, const DeviceTensor& b, const KdaGate& gate, const KdaStatePool& pool,
                 void* workspace, const DeviceTensor& o, cudaStream_t stream);

// One token per sequence (rows = batch.n, cu_seqlens ignored): gates, L2 norm, the delta-rule
// update S ← diag(α)S; u = β(v − Sᵀk); S += k uᵀ; o = Sᵀq (spec §6.5), the state read and written
// once. With o_norm != nullptr the gated RMSNorm is fused: out = RMSNorm(o)·o_norm·sigmoid(g~)
// (g_logits [n, P]); else out = o.
void kda_decode(const KdaBatch& batch, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                const DeviceTensor& f, const DeviceTensor& b, const KdaGate& gate, const KdaStatePool& pool,
                const float* o_norm, const DeviceTensor& g_logits, float eps, const DeviceTensor& out,
                cudaStream_t stream);

// Gated RMSNorm (spec §6.7) per head of D = 128: y = o·r·w·sigmoid(g) with r = 1/sqrt(mean(o²)+eps).
// o, g: [rows, P] (f32 or bf16), w: f32 [D], y: [rows, P] f32 or bf16.
void kda_gated_rms_norm(const DeviceTensor& o, const DeviceTensor& g, const float* w, float eps,
                        const DeviceTensor& y, cudaStream_t stream);

// State slots: dst_slots[i] ← src_slots[i] for i < n (recurrent and conv); zero: slots[i] ← 0.
// Slot arrays are device int32. The pools must have the same H, D and W.
void kda_state_copy(const KdaStatePool& src, const int32_t* src_slots, const KdaStatePool& dst,
                    const int32_t* dst_slots, int n, cudaStream_t stream);
void kda_state_zero(const KdaStatePool& pool, const int32_t* slots, int n, cudaStream_t stream);

}  // namespace k3::cuda
