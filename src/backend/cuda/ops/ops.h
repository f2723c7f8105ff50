// The CUDA backend's memory-bound kernels, one translation unit each. Every function checks dtypes
// and shapes on the host (k3::Error on a mismatch), launches on `stream` and checks the launch; none
// synchronises. Activation tensors are row-major; f32 and bf16 are accepted where noted, and the
// math is fp32 throughout. Vector kernels need cols % 8 == 0 and 16-byte aligned rows (true for
// every Kimi-K3 width and for Arena allocations).
// Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/core/tensor.h"

namespace k3 {
struct ActivationConfig;
struct MoeConfig;
}  // namespace k3

namespace k3::cuda {

// ---- argmax.cu ----------------------------------------------------------------------------------
// out[r] = the column of row r's largest value, the lowest column on ties (as the host's greedy
// sampler), or −1 when the row holds a NaN or an infinity. logits: f32 [rows, n]; out: device int32 [rows].
void row_argmax(const DeviceTensor& logits, int32_t* out, cudaStream_t stream);

// ---- sample.cu ----------------------------------------------------------------------------------
// Per row of `logits` (f32 [rows, n], modified: the penalties are subtracted in place) the token of
// params[r] (device array), as RowSampling documents (backend/executor.h): penalties from the CSR
// lists (penalty_offsets [rows + 1] into penalty_ids / penalty_amounts), then greedy, or temperature,
// top-k (threshold on the logits), top-p and min-p (thresholds on p = exp((l − max)/T)), and the
// token where u × the kept mass falls in id order. out: device int32 [rows], −1 for a non-finite row.
struct SampleRowParams {
  float temperature, top_p, min_p, u;
  int32_t top_k, greedy;
};
void sample_rows(const DeviceTensor& logits, const SampleRowParams* params, const int32_t* penalty_offsets,
                 const int32_t* penalty_ids, const float* penalty_amounts, int32_t* out, cudaStream_t stream);

// ---- norm.cu ------------------------------------------------------------------------------------
// y[t] = x[t] · r · w with r = 1 / sqrt(mean(x[t]²) + eps), as cpu::rms_norm. x, y: f32 or bf16
// [rows, n], n <= 32768; w: f32 [n] on the device.
void rms_norm(const DeviceTensor& x, const float* w, float eps, const DeviceTensor& y, cudaStream_t stream);

// ---- attn_res.cu --------------------------------------------------------------------------------
// AttnRes mix fused with the following RMSNorm, as cpu::attn_res_mix_norm (spec §3.2), per row t:
//   s_j = (Σ_i v_j[i]·c[i]) · r(v_j),  p = softmax_j(s),  mix = Σ_j p_j·v_j,  y = mix · r(mix) · norm_w
// with r(v) = 1/sqrt(mean(v²) + eps) (the same eps for scoring and the final norm, as the CPU path).
// candidates: 1..kMaxAttnResCandidates tensors of one dtype (f32 or bf16), each [rows, n]; c and
// norm_w: f32 [n] on the device; y: f32 or bf16 [rows, n].
// Each candidate is read once (online softmax) for rows up to 8192 wide, twice above (ops_tuning.h).
inline constexpr int kMaxAttnResCandidates = 16;
void attn_res_mix_norm(std::span<const DeviceTensor> candidates, const float* c, const float* norm_w, float eps,
                       const DeviceTensor& y, cudaStream_t stream);

// ---- activation.cu ------------------------------------------------------------------------------
// out = act(g, u) elementwise with g = gate·gate_alpha, u = up·up_alpha, as the CPU MoE/MLP
// (spec §2.1; the alphas are the GEMM1 weights' per-tensor dequant multipliers, applied BEFORE
// SiTU's tanh — the DESIGN.md trap — and 1 when the GEMMs return dequantised outputs):
//   SiLU: g·sigmoid(g)·u
//   SiTU: β·tanh(g/β)·sigmoid(g)·u',  u' = β_lin·tanh(u/β_lin) when a β_lin cap is set, else u.
// gate and up: same dtype (f32 or bf16), same shape; they may be column slices of one fused
// gate|up buffer. out: f32 or bf16 of the same shape.
struct GatedActivation {
  bool situ = false;
  float beta = 1.0f;      // SiTU β
  float beta_lin = 0.0f;  // SiTU β_lin; 0 = no cap on up
  float gate_alpha = 1.0f;
  float up_alpha = 1.0f;
};
GatedActivation gated_activation_params(const ActivationConfig& a);
void gated_activation(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                      const DeviceTensor& out, cudaStream_t stream);
// The checks on act, gate and up that gated_activation makes (what: the caller, for the message), for
// the kernels that apply the activation while they quantise GEMM 2's input (moe_quantize_*_activation).
void check_gated_activation(const GatedActivation& act, const DeviceTensor& gate, const DeviceTensor& up,
                            const char* what);

// ---- moe_router.cu ------------------------------------------------------------------------------
// The MoE router for every token in one kernel, as the CPU route() (spec §7.1): scores (sigmoid or
// softmax) of fp32 logits, correction bias added for selection only, DeepSeek grouped selection
// when groups > 1 and topk_group < groups (a group's score = the sum of its two best choices),
// top-k with ties to the lower expert index, weights = unbiased scores of the picked experts,
// renormalised to sum 1 (+1e-20) when asked, times the routed scaling factor.
struct RouterParams {
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t groups = 1;      // already 1 when grouped top-k is off
  int64_t topk_group = 1;
  bool sigmoid = true;     // false: softmax
  bool renormalize = true;
  float scaling = 1.0f;
};
RouterParams router_params(const MoeConfig& m);
// logits: f32 [T, E]; bias: f32 [E] on the device (nullptr: no bias); ids: i32 [T, k] in pick
// order; weights: f32 [T, k]. One warp per token when there is no group restriction and E <= 1024
// (Kimi-K3), else one CTA per token (ops_tuning.h).
void moe_route(const RouterParams& p, const DeviceTensor& logits, const float* bias, const DeviceTensor& ids,
               const DeviceTensor& weights, cudaStream_t stream);

}  // namespace k3::cuda
