// config.json documents of the real architectures at test sizes, for `k3 make-tiny`.
//  - kimi-k3: the multimodal wrapper with the text model under text_config, every K3 feature on
//    (AttnRes, latent MoE with norm, SiTU, MLA output gate, bounded KDA gate, full-rank g_proj);
//  - kimi-linear: the flat Kimi-Linear layout (softplus gate, low-rank g, SiLU, grouped top-k).
// Dimensions are chosen so that every family's block formats tile them: expert rows and the MLA
// kv_lora_rank are multiples of 256 (GGUF K-quants), qk_nope of 32 (Q4_0 split k_b).
#pragma once

#include <string>

#include "io/json.h"

namespace k3 {

enum class TinyArch { KimiK3, KimiLinear };
enum class TinySize { Tiny, Small };

TinyArch parse_tiny_arch(const std::string& name);  // "kimi-k3" | "kimi-linear"
TinySize parse_tiny_size(const std::string& name);  // "tiny" | "small"

// The whole config.json (no quantization_config: families add theirs).
Json tiny_config_json(TinyArch arch, TinySize size);

// The object that holds the text-model fields: doc["text_config"] for kimi-k3, doc itself otherwise.
Json& text_config_of(Json& doc);

}  // namespace k3
