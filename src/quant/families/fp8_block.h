// 128×128 block FP8 checkpoints, in two spellings that store the same numbers:
//  - DeepSeek style: quantization_config {quant_method "fp8", fmt "e4m3", activation_scheme
//    "dynamic", weight_block_size [128, 128]}; `<m>.weight` F8_E4M3 [N, K] and
//    `<m>.weight_scale_inv` F32 [cdiv(N,128), cdiv(K,128)];
//  - compressed-tensors "float-quantized", weights strategy "block" (planned by
//    plan_compressed_tensors): the same tensors with the scale named `<m>.weight_scale`.
// In both the scale is a dequant MULTIPLIER despite DeepSeek's name (spec formats §2.4):
// w = e4m3(q) · scale[n/128][k/128].
#pragma once

#include <cstdint>
#include <string>

#include "io/json.h"
#include "quant/families/family_writer.h"
#include "quant/families/master.h"
#include "quant/plan/load_plan.h"

namespace k3 {

inline constexpr uint32_t kFp8BlockSize = 128;

enum class Fp8BlockStyle { DeepSeek, CompressedTensors };

// The make-tiny producer rule (DeepSeek-V3's release convention): every nn.Linear is FP8 except
// lm_head; the router gate (not an nn.Linear), embeddings, norms, AttnRes vectors and the KDA F32
// tensors (conv, A_log, dt_bias, o_norm) stay unquantized.
bool fp8_block_producer_quantizes(const ParamSpec& spec);

// Block-FP8 projections the engine dequantizes to BF16 at load (spec formats §2.4, stated for
// FP8_PB_WO and applied to every block-FP8 family [UNCONFIRMED]): KDA f_a_proj, f_b_proj, b_proj
// (tiny GEMVs) and MLA kv_b_proj (split into w_kc / w_vc for weight absorption).
bool fp8_block_dequantized_to_bf16_at_load(const std::string& param);
// Adds Transform::DequantToBf16 to an Fp8Block binding of such a parameter.
void add_fp8_block_load_transforms(Binding& binding);

// {quant_method "fp8", fmt "e4m3", activation_scheme "dynamic", weight_block_size [128, 128]}.
Json deepseek_fp8_quantization_config();

// The writer of a block-FP8 checkpoint of either style (producer rule above, quantize_fp8_block:
// scale = amax/448 per tile). make-tiny's `fp8-block` is the DeepSeek style.
WritePlan write_plan_fp8_block_checkpoint(Fp8BlockStyle style, const FloatSource& source, Json config_doc);
// That writer run over a master (the compressed-tensors style has no make-tiny family of its own).
void write_fp8_block_checkpoint(Fp8BlockStyle style, const MasterWeights& master, Json config_doc,
                                const std::string& out_dir);

}  // namespace k3
