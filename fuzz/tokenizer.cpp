// Fuzzes the tokenizer on a small built-in vocabulary (the make-tiny one, Kimi pattern and
// chunking): encoding any bytes either throws k3::Error (invalid UTF-8 only) or gives ids that
// decode back to the same bytes, with and without special-token names recognised; any id sequence
// decodes, and streaming decode equals the whole decode.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tiny_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const k3::Tokenizer& tokenizer() {
  static const k3::Tokenizer tok = [] {
    const std::vector<std::string> tokens = k3::make_tiny_vocab(1024);
    auto specials = k3::parse_special_tokens(
        R"({"added_tokens_decoder":{"1024":{"content":"[BOS]"},"1025":{"content":"<|open|>","special":false}}})",
        static_cast<uint32_t>(tokens.size()), "fuzz_tokenizer_config.json");
    return k3::Tokenizer(tokens, std::move(specials), k3::kimi_pattern(), k3::ChunkLimits::kimi());
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const k3::Tokenizer& tok = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = k3::utf8::first_invalid(text) == std::string_view::npos;
  for (k3::Specials specials : {k3::Specials::kNone, k3::Specials::kAll}) {
    std::vector<uint32_t> ids;
    try {
      ids = tok.encode(text, specials);
    } catch (const k3::Error&) {
      if (valid) __builtin_trap();  // valid UTF-8 always encodes
      continue;
    }
    if (!valid) __builtin_trap();
    for (uint32_t id : ids)
      if (id >= tok.n_vocab()) __builtin_trap();
    if (tok.decode(ids) != text) __builtin_trap();  // round trip
  }
  // The bytes as ids (little-endian pairs, wrapped into the vocabulary).
  std::vector<uint32_t> ids;
  for (size_t i = 0; i + 1 < size; i += 2) ids.push_back((data[i] | data[i + 1] << 8) % tok.n_vocab());
  for (k3::SkipSpecial skip : {k3::SkipSpecial::kNone, k3::SkipSpecial::kFlagged, k3::SkipSpecial::kAll}) {
    const std::string whole = tok.decode(ids, skip);
    k3::StreamDecoder stream(tok, skip);
    std::string streamed;
    for (uint32_t id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    if (streamed != whole) __builtin_trap();
  }
  return 0;
}
