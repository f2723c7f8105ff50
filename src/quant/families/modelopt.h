// ModelOpt family constants shared by the writer and the tests (spec k3-quant-formats.md §2).
#pragma once

#include <string>

#include "model/parameters.h"

namespace k3::modelopt {

// [UNCONFIRMED] The K3 recipe pins the activation amax to a constant (spec §2.3, value not
// published). make-tiny uses this one, so input_scale = 8/(6·448) for NVFP4 and 8/448 for FP8,
// far from 1.
inline constexpr float kRecipeInputAmax = 8.0f;
inline constexpr float kNvfp4InputScale = kRecipeInputAmax / (6.0f * 448.0f);
inline constexpr float kFp8InputScale = kRecipeInputAmax / 448.0f;

// Tiny projections that FP8_PB_WO checkpoints dequantize to BF16 at load (spec §2.4): KDA f_a_proj,
// f_b_proj, b_proj and MLA kv_b_proj.
bool dequantized_at_load(const std::string& param);

// Parameters ModelOpt never quantizes whatever the config says (spec §2.2, K3 overrides): everything
// that is not a Linear or ExpertBank, the router, the latent projections (ModelOpt lacks the
// latent-projection flag) and lm_head (not a LinearBase in sglang). They always bind BF16.
bool never_quantized(const ParamSpec& spec);

}  // namespace k3::modelopt
