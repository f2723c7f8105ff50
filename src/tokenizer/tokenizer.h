// tiktoken-compatible tokenizer: a rank table (tiktoken.model), the special tokens that follow it
// (tokenizer_config.json), a PCRE2 pre-tokenizer and byte-level rank BPE.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace k3 {

// How special-token names inside input text are treated (tiktoken allowed_special).
enum class Specials { kNone, kAll };

// Which added tokens (the special ids ≥ num_base) decoding leaves out: none; those flagged `special`
// (HF skip_special_tokens: the K3 markers stay); or all of them, so no marker text is left.
enum class SkipSpecial { kNone, kFlagged, kAll };

struct SpecialToken {
  std::string name;
  uint32_t id = 0;
  bool special = true;  // false: kept by decode(skip_special=true) (the K3 XTML markers)
};

// Kimi's _encode_text_piece chunking (spec §2.1.2); zero disables a limit.
struct ChunkLimits {
  size_t window = 0;  // code points per window
  size_t run = 0;     // longest run of whitespace / non-whitespace code points
  static ChunkLimits kimi() { return {400000, 25000}; }
};

// Parses tiktoken.model text: one "<base64 bytes> <rank>" per line, empty lines ignored. Checks that
// ranks are dense 0..N-1 and unique, byte strings unique and all 256 single bytes present. Errors
// name `path` and the line. Returns the token bytes indexed by rank.
std::vector<std::string> parse_tiktoken_model(std::string_view text, const std::string& path);

// The 256 special tokens at ids num_base..num_base+255 from a tokenizer_config.json text: names from
// added_tokens_decoder, otherwise "<|reserved_token_{id}|>".
std::vector<SpecialToken> parse_special_tokens(std::string_view config_json, uint32_t num_base,
                                               const std::string& path);

class Tokenizer {
 public:
  static constexpr uint32_t kNumSpecials = 256;

  // DIR/tiktoken.model + DIR/tokenizer_config.json with the Kimi pattern and Kimi chunking.
  static Tokenizer load(const std::string& dir);

  Tokenizer(const std::vector<std::string>& tokens, std::vector<SpecialToken> specials, const std::string& pattern,
            ChunkLimits chunking = {});

  // Throws k3::Error on invalid UTF-8 (naming the byte offset).
  std::vector<uint32_t> encode(std::string_view text, Specials specials) const;
  void encode(std::string_view text, Specials specials, std::vector<uint32_t>& out) const;
  // Ordinary text only (no special scan, no chunking); text must be valid UTF-8.
  void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const;

  // Bytes of all ids joined (those `skip` leaves out dropped), invalid UTF-8 replaced per maximal
  // subpart. Throws on an id ≥ n_vocab.
  std::string decode(std::span<const uint32_t> ids, SkipSpecial skip = SkipSpecial::kNone) const;
  // skip_special: HF skip_special_tokens (SkipSpecial::kFlagged).
  std::string decode(std::span<const uint32_t> ids, bool skip_special) const {
    return decode(ids, skip_special ? SkipSpecial::kFlagged : SkipSpecial::kNone);
  }
  // Whether decoding under `skip` leaves id out.
  bool skipped(uint32_t id, SkipSpecial skip) const {
    return is_special_id(id) && (skip == SkipSpecial::kAll || (skip == SkipSpecial::kFlagged && special(id).special));
  }
  // Raw bytes of one id (a special's name for special ids). Throws on an id ≥ n_vocab.
  std::string_view token_bytes(uint32_t id) const;

  uint32_t num_base() const { return bpe_.ranks().size(); }
  uint32_t n_vocab() const { return num_base() + static_cast<uint32_t>(specials_.size()); }
  bool is_special_id(uint32_t id) const { return id >= num_base() && id < n_vocab(); }
  const SpecialToken& special(uint32_t id) const { return specials_[id - num_base()]; }
  std::optional<uint32_t> find_special(std::string_view name) const;
  // Throws k3::Error "unknown special token '<name>'".
  uint32_t special_id(std::string_view name) const;

  const Pretokenizer& pretokenizer() const { return pretokenizer_; }
  const RankTable& ranks() const { return bpe_.ranks(); }

 private:
  void encode_chunk(std::string_view chunk, Specials specials, std::vector<uint32_t>& out) const;
  // Leftmost special name in text at or after pos: {offset, id}; offset == npos when none.
  std::pair<size_t, uint32_t> find_special_in(std::string_view text, size_t pos) const;

  Bpe bpe_;
  std::vector<SpecialToken> specials_;
  std::unordered_map<std::string, uint32_t> special_ids_;
  bool special_first_byte_[256] = {};
  Pretokenizer pretokenizer_;
  ChunkLimits chunking_;
};

// Cuts text (valid UTF-8) as Kimi's _encode_text_piece does before tiktoken sees it.
std::vector<std::string_view> chunk_text(std::string_view text, ChunkLimits limits);

// Streaming decode: feed ids one by one; the concatenated output equals decode(all ids), and no
// output ever ends inside a UTF-8 sequence (an incomplete tail waits for the next id). The specials
// named in `kept` are decoded whatever `skip` says (a chat format's markers, which its parser
// needs); names the tokenizer does not have are ignored.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, SkipSpecial skip = SkipSpecial::kNone,
                         std::span<const std::string> kept = {});
  std::string push(uint32_t id);
  std::string finish();  // flushes a pending incomplete tail as U+FFFD

 private:
  const Tokenizer& tokenizer_;
  SkipSpecial skip_;
  std::vector<bool> kept_;  // per special id (id - num_base); empty when none is kept
  utf8::Stream utf8_;
};

}  // namespace k3
