#include "chat/token_pieces.h"

namespace k3::chat {

TokenPieces::TokenPieces(const Tokenizer& tokenizer, const std::vector<std::string>& markers, SkipSpecial skip)
    : tokenizer_(tokenizer), skip_(skip) {
  for (size_t i = 0; i < markers.size(); ++i) {
    if (const std::optional<uint32_t> id = tokenizer.find_special(markers[i])) markers_.push_back({*id, i});
  }
}

std::optional<size_t> TokenPieces::marker(uint32_t id) const {
  for (const auto& [marker_id, index] : markers_)
    if (marker_id == id) return index;
  return std::nullopt;
}

ChatDelta TokenPieces::feed(OutputParser& parser, uint32_t id) const {
  const std::string_view bytes = tokenizer_.token_bytes(id);  // checks the id
  if (const std::optional<size_t> index = marker(id)) return parser.marker(*index);
  if (tokenizer_.skipped(id, skip_)) return {};
  return parser.text(bytes);
}

ParsedMessage parse_ids(OutputParser& parser, const TokenPieces& pieces, std::span<const uint32_t> ids, bool ended) {
  for (uint32_t id : ids) pieces.feed(parser, id);
  parser.finish(ended);
  return parser.message();
}

}  // namespace k3::chat
