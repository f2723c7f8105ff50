#include "tokenizer/synthetic_tokenizer.h"

#include <string>
#include <vector>

#include "core/error.h"

namespace k3 {

Tokenizer synthetic_tokenizer(int64_t vocab) {
  const int64_t base = vocab - Tokenizer::kNumSpecials;
  if (base <= 256) throw Error(Where{"", "", "vocab_size"}, std::to_string(vocab) + " is too small for a synthetic tokenizer");
  std::vector<std::string> tokens;
  tokens.reserve(static_cast<size_t>(base));
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (int64_t r = 256; r < base; ++r) tokens.push_back(" <" + std::to_string(r) + ">");
  std::vector<SpecialToken> specials;
  for (int64_t i = 0; i < Tokenizer::kNumSpecials; ++i) {
    const uint32_t id = static_cast<uint32_t>(base + i);
    specials.push_back({"<|reserved_token_" + std::to_string(id) + "|>", id, true});
  }
  return Tokenizer(tokens, std::move(specials), kimi_pattern());
}

}  // namespace k3
