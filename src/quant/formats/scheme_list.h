// The one list of quantization schemes. Every layer builds its per-scheme table from it, so adding a
// scheme is one line here plus the scheme's folder under src/quant/formats/ (docs/adding-a-format.md).
//
// K3_SCHEME_LIST(X) calls X(Kind, name) once per scheme:
//   Kind  the SchemeKind enumerator (quant/plan/scheme.h);
//   name  the suffix of the scheme's per-layer entries, which its folder defines: the plan's
//         `plan_format_<name>` (quant/plan/plan_format.h), the CPU backend's `cpu_format_<name>`
//         and the CUDA backend's `cuda_format_<name>`.
#pragma once

// clang-format off
#define K3_SCHEME_LIST(X)                                                                            \
  X(Dense, dense)                  /* formats/dense: BF16 / F16 / F32 stored as is (storage names which) */ \
  X(Fp8Tensor, fp8_tensor)         /* formats/fp8: F8_E4M3 weight × one F32 multiplier (ModelOpt FP8) */ \
  X(Fp8Block, fp8_block)           /* formats/fp8: F8_E4M3 × F32 multiplier per block_n×block_k tile */ \
  X(Nvfp4, nvfp4)                  /* formats/nvfp4: E2M1 × E4M3 per-16 scale × F32 weight_scale_2 */ \
  X(Mxfp4, mxfp4)                  /* formats/mxfp4: E2M1 × E8M0 per-32 scale */                      \
  X(W4A8, w4a8)                    /* formats/modelslim: int4 × per-channel (× per-group) scale, int8 activations */ \
  X(W8A8, w8a8)                    /* formats/modelslim: int8 × per-channel scale, int8 activations */ \
  X(Ggml, ggml)                    /* formats/ggml: one GGML block type (storage = "Q4_K", …) */      \
  X(GgmlSplitKvB, ggml_split_kv_b) /* formats/ggml: MLA kv_b as split k_b (Q4_0) + v_b (Q2_K), ExpertPack */
// clang-format on
