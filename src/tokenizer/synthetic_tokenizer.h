// A stand-in tokenizer for models served without one (synthetic weights generated on a device):
// the 256 byte tokens, then base token r ≥ 256 spelled " <r>" (ASCII, unique), then the 256
// special tokens "<|reserved_token_{id}|>". It exists so that generated ids can be shown as text;
// prompts to such a model are token ids.
#pragma once

#include <cstdint>

#include "tokenizer/tokenizer.h"

namespace k3 {

// A tokenizer of exactly `vocab` ids (vocab > 256 + Tokenizer::kNumSpecials).
Tokenizer synthetic_tokenizer(int64_t vocab);

}  // namespace k3
