#include "chat/stream_text.h"

namespace k3::chat {

void ChatDelta::add_arguments(size_t index, std::string_view fragment) {
  if (fragment.empty()) return;
  if (!tool_calls.empty() && tool_calls.back().index == index) {
    tool_calls.back().arguments += fragment;
  } else {
    tool_calls.push_back({index, "", "", std::string(fragment)});
  }
}

void ChatDelta::append(const ChatDelta& later) {
  reasoning_content += later.reasoning_content;
  content += later.content;
  for (const ToolCallDelta& c : later.tool_calls) {
    if (c.id.empty()) {
      add_arguments(c.index, c.arguments);
    } else {
      tool_calls.push_back(c);
    }
  }
}

void ParsedMessage::add(const ChatDelta& delta) {
  auto join = [](std::optional<std::string>& field, const std::string& text) {
    if (text.empty()) return;
    if (!field) field.emplace();
    field->append(text);
  };
  join(reasoning_content, delta.reasoning_content);
  join(content, delta.content);
  for (const ToolCallDelta& c : delta.tool_calls) {
    if (!c.id.empty()) {
      tool_calls.push_back({c.id, c.name, c.arguments, true});
    } else if (c.index < tool_calls.size()) {
      tool_calls[c.index].arguments += c.arguments;
    }
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

std::string_view trim_space(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) + 1 - first);
}

ChatDelta OutputParser::take() {
  message_.add(delta_);
  ChatDelta d = std::move(delta_);
  delta_ = ChatDelta();
  return d;
}

void OutputParser::flush_utf8() {
  const std::string t = utf8_.flush();
  if (!t.empty()) on_text(t);
}

ChatDelta OutputParser::text(std::string_view bytes) {
  const std::string t = utf8_.push(bytes);
  if (!t.empty()) on_text(t);
  return take();
}

ChatDelta OutputParser::marker(size_t index) {
  flush_utf8();
  on_marker(index);
  return take();
}

ChatDelta OutputParser::feed(std::string_view text) {
  held_.append(text);
  const std::string buf = std::move(held_);
  held_.clear();
  ChatDelta out;
  size_t emitted = 0;  // buf[0, emitted) has been handed on
  for (size_t p = 0; p < buf.size(); ++p) {
    for (size_t m = 0; m < markers_.size(); ++m) {
      const std::string& name = markers_[m];
      if (buf[p] != name[0]) continue;
      if (buf.compare(p, name.size(), name) == 0) {
        out.append(this->text(std::string_view(buf).substr(emitted, p - emitted)));
        out.append(marker(m));
        emitted = p + name.size();
        p = emitted - 1;
        break;
      }
      if (buf.size() - p < name.size() && name.compare(0, buf.size() - p, buf, p) == 0) {  // may complete later
        out.append(this->text(std::string_view(buf).substr(emitted, p - emitted)));
        held_ = buf.substr(p);
        return out;
      }
    }
  }
  out.append(this->text(std::string_view(buf).substr(emitted)));
  return out;
}

ChatDelta OutputParser::finish(bool ended) {
  held_.clear();  // a partial marker name at the very end
  flush_utf8();
  if (ended && !ended_) on_end();
  ChatDelta last = take();
  if (call_open_ && !message_.tool_calls.empty()) message_.tool_calls.back().complete = false;
  message_.finish_reason = !ended_ ? "length" : message_.tool_calls.empty() ? "stop" : "tool_calls";
  return last;
}

void OutputParser::start_call(std::string id, std::string name) {
  delta_.tool_calls.push_back({calls_++, std::move(id), std::move(name), ""});
  call_open_ = true;
}

}  // namespace k3::chat
