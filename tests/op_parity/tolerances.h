// One tolerance per op, and why it has that size. Every case compares a target's fp32 output with a
// float64 reference of the same operands (for weights: the exact dequantised values, materialize()),
// so what is left to allow for is fp32 arithmetic and — for formats whose kernels quantise their
// input — the activation quantisation those kernels define. A wrong formula, scale, layout or state
// moves results by a sizeable fraction of their magnitude, far above every allowance below. Targets
// are also checked against each other with the same allowance. Measured errors quoted below are the
// largest over all cases on the scalar, avx2 and avx512 tiers (an x86-64 host with AVX-512 VNNI).
#pragma once

#include <cmath>

namespace k3::op_parity {

// ---- linear: an allowance per output value, derived from its operands ------------------------
// (measured: ≤ 1.1e-2 of the allowance, relative error ≤ 7.7e-7, MXFP4 exact)
// The reference multiplies materialize()'s weights with the activations in the form the scheme's
// kernel defines (weight_matrix.h ActivationForm: float; 16-bit fixed point per 16/32 values for
// NVFP4/MXFP4; int8 per token for ModelSlim, per 32/256 values for GGUF, static scale for W8A8
// static), computed in float64. Then
//   |y − Σ_k w_k·x̃_k| ≤ kLinearSummation · Σ_k |w_k·x̃_k| + Σ_{k near a tie} |w_k|·step_k.
// kLinearSummation is the kernel tests' bound for float32 accumulation over K
// (tests/backend/cpu/kernel_test_util.h kSummationTolerance: ≤ ~K·2^-24 worst case, K ≤ 2048); it
// also covers the float32 rounding of the activation scales (2^-24 relative).
inline constexpr double kLinearSummation = 3e-5;
// An int8 code is decided by x/step rounded to nearest; where that quotient lies within this
// distance (in code units) of a .5 tie, the kernel's float32 quotient (error ≤ 127·2^-23 ≈ 1.5e-5
// code units) may round the other way, so that value may differ by one step. Fixed16 codes are
// exact (a power-of-two scaling) and never flip.
inline constexpr double kInt8TieWindow = 1e-4;

// ---- ops without linear weights: max |Δ| ≤ tolerance · max |reference| per row ----------------
// rms_norm: inv_rms in float64, then two float32 products per value (≤ 3 roundings of 2^-24);
// measured 1.1e-7.
inline constexpr double kRmsNormTolerance = 1e-6;
// attn_res_mix_norm: float32 scores (dots in float64, rounded), exp and softmax over the candidates
// (relative error ~ |score|·2^-24), float32 mixing sum, then rms_norm; measured 1.8e-7.
inline constexpr double kAttnResMixNormTolerance = 2e-6;
// gated activation: float32 exp/tanh/products (a few ulp each) on g·α_g and u·α_u; measured 2.5e-7.
inline constexpr double kGatedActivationTolerance = 1e-6;
// route: float32 sigmoid / softmax and renormalisation of the weights (a few ulp), measured 1.9e-7;
// the chosen experts must be identical — the cases' logits keep every selection margin ≥
// kRouteMinMargin, far above float32 rounding (~1e-7), so a near-tie cannot decide the choice.
inline constexpr double kRouteTolerance = 2e-6;
inline constexpr double kRouteMinMargin = 1e-4;

// ---- block ops over tiny checkpoints: max |Δ| ≤ tolerance · max |reference| per token ----------
// By the activation numerics of the family's kernels in the block (block_cases.cpp, act_class):
//  - float: float32 activations into every weight (BF16, F16, F32, FP8): fp32 arithmetic only, through
//    chains of linears and RMSNorms, the KDA recurrence over 37 tokens or the MLA softmax;
//  - fixed16: the 4-bit weight-only kernels (NVFP4, MXFP4) quantise activations to 16-bit fixed point
//    per block (≤ 2^-15 of the block max per value); the reference keeps them float;
//  - int8: ModelSlim and GGUF kernels quantise activations to int8 as the format defines; the
//    reference applies the same rule in float64 (reference::format_activation_rule) and matches to
//    ~4e-6 — until a value within rounding noise of a code boundary takes different codes on the two
//    sides: one code step (1/127 of a token's or block's largest value) on one input of a linear,
//    measured 2.0e-3 of the row (gguf/kimi-k3 MLA, one prefill token, avx2 tier only). The int8
//    numerics themselves are pinned per linear by the linear cases; here the allowance guards the
//    block's formulas and state, whose errors move outputs by ≥ 1e-1.
struct BlockTolerance {
  double float_acts, fixed16, int8;
};
// KDA: projections, short conv, gated delta rule (chunked prefill, recurrent decode), gated RMSNorm,
// o_proj; measured float 4.0e-6, fixed16 4.5e-4, int8 4.0e-6.
inline constexpr BlockTolerance kKdaTolerance{3e-5, 2e-3, 1e-2};
// MLA: q-LoRA with RMSNorm, kv_a, softmax over up to 38 keys; decode takes the absorbed form (see
// block_cases.cpp on kv_b's activation rule there); measured float 1.1e-6, fixed16 2.0e-4, int8
// 2.0e-3 (the code flip above).
inline constexpr BlockTolerance kMlaTolerance{1e-5, 2e-3, 1e-2};
// MoE: fp32 router (choices kept kRouteMinMargin away from ties: block_cases.cpp checks it), experts'
// gated MLPs under the scale contract, latent projections and norm, shared expert; measured float
// 1.0e-6, fixed16 3.9e-4, int8 7.5e-7.
inline constexpr BlockTolerance kMoeTolerance{1e-5, 2e-3, 1e-2};
// Dense MLP: gate/up, activation, down; measured float 6.6e-7, int8 1.2e-6 (no family stores the
// dense MLP in a 4-bit format).
inline constexpr BlockTolerance kMlpTolerance{1e-5, 2e-3, 1e-2};

// ---- the CUDA target (tests/op_parity/cuda/) --------------------------------------------------
// The CUDA backend keeps activations in bf16 between its GEMMs (8 significant bits: RNE relative error
// ≤ 2^-9 per value), uploads every weight that is not FP8 or a packed expert bank dequantised to bf16
// (≤ 2^-9 relative per weight), and its FP8 GEMMs quantise activations to e4m3 (3 mantissa bits:
// ≤ 2^-4 relative per value). Its allowances are therefore set by these formats, not by fp32
// arithmetic; a wrong formula, layout or state still moves results by ≥ 1e-1 of their magnitude.
// linear, bf16 GEMM: x and W each rounded to bf16 (2^-9 each), fp32 accumulation, f32 output:
// |y − Σ w·x| ≤ (2^-8 + K·2^-24)·Σ|w·x| ≤ 4.0e-3·Σ|w·x| for K ≤ 2048.
inline constexpr double kCudaLinearBf16 = 5e-3;
// linear, FP8 GEMMs: bf16 x (2^-9), then e4m3 per 1×128 block or static scale (2^-4), bf16 output
// (2^-9 of |y| ≤ Σ|w·x|); the e4m3 subnormal step adds ≤ amax·2^-10/448 per value (kFp8SubnormalStep).
inline constexpr double kCudaLinearFp8 = 7e-2;
inline constexpr double kFp8SubnormalStep = 1.0 / (448.0 * 1024.0);
// The pointwise kernels take the cases' f32 rows as f32 (they accept f32 or bf16; bf16 inputs would
// only measure the input rounding) and compute in fp32 with the fast intrinsics (rsqrtf, __expf, tanh
// approximations: a few ulp, relative error growing with |argument|) and warp/CTA reductions in
// another order than the CPU's.
// rms_norm: rsqrtf (≤ 2 ulp) and a tree-ordered sum of squares.
inline constexpr double kCudaRmsNormTolerance = 1e-5;
// attn_res_mix_norm: scores through rsqrtf and dots (|score|·2^-22), online softmax with __expf,
// then rms_norm.
inline constexpr double kCudaAttnResMixNormTolerance = 5e-5;
// gated activation: __expf / tanh of arguments up to ~40 (relative error ~|x|·2^-21).
inline constexpr double kCudaGatedActivationTolerance = 5e-5;
// route: sigmoid / softmax through __expf and the renormalisation; the picks must be identical (the
// cases' margins ≥ kRouteMinMargin stay far above fp32 rounding).
inline constexpr double kCudaRouteTolerance = 2e-5;
// Block ops on the tiny checkpoints (cuda_blocks.cpp: upload_weights, then the executor's block), per
// row: max |Δ| ≤ tolerance · max |reference|, by the activation contract of the block's CUDA linears:
//  - bf16: bf16 activations into every GEMM and between them (a handful of 2^-9 roundings per value
//    along a chain of 3–5 linears and norms; NVFP4 / MXFP4 experts weight-only), bf16 weights;
//  - fp8: the block has FP8 linears, whose GEMMs quantise activations to e4m3 (2^-4 per value; a
//    static input_scale saturates beyond 448 steps) where the reference keeps them float — the CUDA
//    backend's FP8 contract, not the CPU's; KDA's gates (exp of the forget logits over 38 tokens)
//    amplify it most;
//  - int8: the reference applies the format's int8 activation rule to every linear, while CUDA runs the
//    non-expert linears of these formats dequantised with bf16 activations (the packed W4A8 / GGUF
//    expert kernels keep the int8 rule).
// Set from the H200 run (worst row, 2026-12-03): KDA fp8 0.33, int8 0.108; MLA fp8 0.118; MoE fp8
// 0.112, int8 0.064; MLP fp8 0.126; every bf16-contract block within 5e-2. A wrong formula, layout or
// state moves a row by O(1).
struct CudaBlockTolerance {
  double bf16, fp8, int8;
};
inline constexpr CudaBlockTolerance kCudaKdaTolerance{5e-2, 0.5, 0.15};
inline constexpr CudaBlockTolerance kCudaMlaTolerance{5e-2, 0.2, 0.1};
inline constexpr CudaBlockTolerance kCudaMoeTolerance{5e-2, 0.2, 0.1};
inline constexpr CudaBlockTolerance kCudaMlpTolerance{5e-2, 0.2, 0.1};

}  // namespace k3::op_parity
