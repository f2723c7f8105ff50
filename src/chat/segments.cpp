#include "chat/segments.h"

namespace k3::chat {

std::string join(const std::vector<Segment>& segments) {
  std::string out;
  for (const auto& s : segments) out += s.text;
  return out;
}

std::vector<uint32_t> encode(const Tokenizer& tokenizer, const std::vector<Segment>& segments) {
  std::vector<uint32_t> ids;
  for (const auto& s : segments) {
    if (s.control) {
      ids.push_back(tokenizer.special_id(s.text));
    } else {
      tokenizer.encode(s.text, Specials::kNone, ids);
    }
  }
  return ids;
}

}  // namespace k3::chat
