// GGUF type recipes: which GGML type each parameter is stored as when k3 writes a GGUF checkpoint
// (`k3 make-tiny --family gguf|gguf-expert-pack` uses the default; `k3 quantize --recipe NAME`).
// docs/decisions/gguf-quantize-recipes.md says what each one holds and why.
//  - default:      make-tiny's mix (docs/decisions/gguf-make-tiny-types.md);
//  - q4_k_m:       llama.cpp's Q4_K_M rule applied to the Kimi tensors: Q4_K, Q6_K for lm_head and for
//                  the attn_v-like (KDA v_proj, MLA kv_b) and ffn_down-like tensors of the layers
//                  llama.cpp's use_more_bits picks; rows that do not tile 256 fall back as llama.cpp
//                  does (Q4_K → Q5_0, Q6_K → Q8_0);
//  - q2_k_experts: the Kimi-K3 GGUF release: routed experts Q2_K (gate, up) / Q3_K (down), the rest
//                  as the default.
// The ExpertPack family always stores routed experts Q2_K/Q2_K/Q3_K and MLA kv_b as the split
// k_b Q4_0 / v_b Q2_K (the format requires them), whatever the recipe.
#pragma once

#include <string>
#include <vector>

#include "io/ggml_types.h"
#include "model/config.h"
#include "model/parameters.h"

namespace k3 {

enum class GgufRecipe { kDefault, kQ4KM, kQ2KExperts };

// "default" | "q4_k_m" | "q2_k_experts"; throws k3::Error (field '--recipe') listing them otherwise.
GgufRecipe parse_gguf_recipe(const std::string& name);
const char* gguf_recipe_name(GgufRecipe recipe);
std::vector<std::string> gguf_recipe_names();

// The type `spec` is stored as under `recipe` (not used for the split kv_b of the ExpertPack, nor for
// the F32 tensors GGUF derives: ssm_a, *_res_score).
GgmlType gguf_recipe_type(GgufRecipe recipe, const ParamSpec& spec, const K3Config& config, bool expert_pack);

}  // namespace k3
