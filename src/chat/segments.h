// Rendered chat = a list of segments. Control segments are special-token names (markers) encoded
// with specials allowed; every other segment is ordinary text encoded on its own with specials
// treated as text, so user text can never produce a marker id (tokenizer spec §5.1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace k3::chat {

struct Segment {
  std::string text;
  bool control = false;
  bool operator==(const Segment&) const = default;
};

class Segments {
 public:
  void text(std::string s) {
    if (!s.empty()) list_.push_back({std::move(s), false});
  }
  void control(std::string s) { list_.push_back({std::move(s), true}); }
  const std::vector<Segment>& list() const { return list_; }

 private:
  std::vector<Segment> list_;
};

// The printable form (for logs and goldens): all segments joined.
std::string join(const std::vector<Segment>& segments);
// Ids: each control segment must be exactly one special token (else k3::Error "unknown special
// token"), each text segment is encoded separately with Specials::kNone.
std::vector<uint32_t> encode(const Tokenizer& tokenizer, const std::vector<Segment>& segments);

}  // namespace k3::chat
