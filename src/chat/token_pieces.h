// Generated token ids as a chat output parser's pieces (chat/stream_text.h): the ids of the
// parser's markers are markers, every other id is ordinary text — its bytes, or a special token's
// name unless `skip` leaves it out. Parsing ids, a marker name the model spelled with ordinary
// tokens stays text, and the result is a function of the ids alone (tokenizer spec §5.7).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "chat/stream_text.h"
#include "tokenizer/tokenizer.h"

namespace k3::chat {

class TokenPieces {
 public:
  // `markers`: the parser's marker names (OutputParser::marker_names()); names the tokenizer does
  // not have are never seen.
  TokenPieces(const Tokenizer& tokenizer, const std::vector<std::string>& markers, SkipSpecial skip);
  // The marker index of `id`, when it is one of the markers.
  std::optional<size_t> marker(uint32_t id) const;
  // Hands one id to the parser; throws k3::Error for an id outside the vocabulary.
  ChatDelta feed(OutputParser& parser, uint32_t id) const;

 private:
  const Tokenizer& tokenizer_;
  SkipSpecial skip_;
  std::vector<std::pair<uint32_t, size_t>> markers_;  // (id, marker index)
};

// A whole reply's ids through a parser, then finish(ended).
ParsedMessage parse_ids(OutputParser& parser, const TokenPieces& pieces, std::span<const uint32_t> ids, bool ended = false);

}  // namespace k3::chat
