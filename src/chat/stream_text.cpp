#include "chat/stream_text.h"

#include "tokenizer/utf8.h"

namespace k3::chat {

void ChatDelta::add_arguments(size_t index, std::string_view fragment) {
  if (fragment.empty()) return;
  if (!tool_calls.empty() && tool_calls.back().index == index) {
    tool_calls.back().arguments += fragment;
  } else {
    tool_calls.push_back({index, "", "", std::string(fragment)});
  }
}

Json ParsedMessage::to_json() const {
  Json m = Json::object();
  m["role"] = "assistant";
  m["content"] = content ? Json(*content) : Json(nullptr);
  if (reasoning_content) m["reasoning_content"] = *reasoning_content;
  if (!tool_calls.empty()) {
    Json calls = Json::array();
    for (const auto& c : tool_calls)
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

namespace {

// Length of a trailing incomplete (but still possibly valid) UTF-8 sequence.
size_t incomplete_utf8_tail(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto b = static_cast<unsigned char>(s[s.size() - back]);
    if ((b & 0xC0) != 0x80) {  // a lead byte (or ASCII)
      return utf8::scan(s.substr(s.size() - back)).kind == utf8::Kind::kTruncated ? back : 0;
    }
  }
  return 0;
}

}  // namespace

void MarkerSplitter::feed(std::string_view text, const Sink& sink) {
  pending_.append(text);
  const std::string_view buf = pending_;
  size_t emitted = 0;  // buf[0, emitted) has been handed to the sink
  size_t hold = buf.size();
  for (size_t p = 0; p < buf.size(); ++p) {
    bool partial = false;
    const std::string* found = nullptr;
    for (const auto& m : markers_) {
      if (buf[p] != m[0]) continue;
      if (buf.compare(p, m.size(), m) == 0) {
        found = &m;
        break;
      }
      if (buf.size() - p < m.size() && m.compare(0, buf.size() - p, buf.substr(p)) == 0) partial = true;
    }
    if (found) {
      if (p > emitted) sink(false, buf.substr(emitted, p - emitted));
      sink(true, *found);
      emitted = p + found->size();
      p = emitted - 1;
    } else if (partial) {
      hold = p;
      break;
    }
  }
  hold -= incomplete_utf8_tail(buf.substr(emitted, hold - emitted));
  if (hold > emitted) sink(false, buf.substr(emitted, hold - emitted));
  pending_.erase(0, hold);
}

void MarkerSplitter::finish(const Sink& sink) {
  bool marker_prefix = false;
  for (const auto& m : markers_)
    if (!pending_.empty() && m.compare(0, pending_.size(), pending_) == 0) marker_prefix = true;
  if (!pending_.empty() && !marker_prefix) sink(false, utf8::replace_invalid(pending_));
  pending_.clear();
}

}  // namespace k3::chat
