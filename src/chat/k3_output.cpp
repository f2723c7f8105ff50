// K3OutputParser (k3_format.h): the XTML tag stack over the pieces OutputParser hands it.
#include <cctype>
#include <string>

#include "chat/k3_format.h"

namespace k3::chat {
namespace {

enum Marker : size_t { kOpenMarker, kCloseMarker, kSepMarker, kEndMarker };

constexpr std::string_view kSpace = " \t\n\r\f\v";

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.substr(i, from.size()) == from) {
      out += to;
      i += from.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The value of attribute `key` in a header, as the regex (\w+)="([^"]*)" finds attributes (the
// first one wins), unescaped &quot; then &amp;; "" when absent.
std::string attribute(std::string_view header, std::string_view key) {
  for (size_t eq = header.find("=\""); eq != std::string_view::npos; eq = header.find("=\"", eq + 1)) {
    size_t k = eq;
    while (k > 0 && is_word(header[k - 1])) --k;
    const size_t close = header.find('"', eq + 2);
    if (close == std::string_view::npos) break;
    if (k < eq && header.substr(k, eq - k) == key)
      return replace_all(replace_all(header.substr(eq + 2, close - eq - 2), "&quot;", "\""), "&amp;", "&");
    if (k < eq) eq = close;
  }
  return {};
}

}  // namespace

std::vector<std::string> K3OutputParser::markers() {
  return {std::string(kOpen), std::string(kClose), std::string(kSep), std::string(kEndOfMsg)};
}

K3OutputParser::K3OutputParser(bool thinking, std::string call_id_prefix)
    : OutputParser(markers()),
      stack_{{Tag::kMessage, "message"}, thinking ? Frame{Tag::kThink, "think"} : Frame{Tag::kResponse, "response"}},
      call_id_prefix_(std::move(call_id_prefix)) {}

void K3OutputParser::on_marker(size_t index) {
  if (ended()) return;
  space_.clear();  // a run of text directly inside the message ends at any marker
  message_text_ = false;
  const Mode header = mode_;  // <|sep|> ends a header; so does any other marker, leniently
  mode_ = Mode::kBody;
  if (header == Mode::kOpenHeader) open_tag(header_);
  if (header == Mode::kCloseHeader) close_tag(header_);
  header_.clear();
  if (ended()) return;
  if (index == kOpenMarker) mode_ = Mode::kOpenHeader;
  if (index == kCloseMarker) mode_ = Mode::kCloseHeader;
  if (index == kEndMarker) on_end();
}

void K3OutputParser::on_text(std::string_view text) {
  if (ended()) return;
  if (mode_ != Mode::kBody) {
    header_ += text;
    return;
  }
  auto owner = stack_.rbegin();  // unknown tags are transparent
  while (owner->tag == Tag::kUnknown) ++owner;
  switch (owner->tag) {
    case Tag::kThink: add_reasoning(text); break;
    case Tag::kResponse: add_content(text); break;
    case Tag::kMessage: message_text(text); break;
    case Tag::kArgument:
      if (!call_.in_argument) break;
      if (call_.arg_type == "string") {
        add_arguments(escape_json_text(text));
      } else {
        call_.arg_value += text;
      }
      break;
    case Tag::kJson:
      if (call_.active && call_.raw) {
        add_arguments(text);
        call_.wrote = true;
      }
      break;
    default: break;  // tools, call (between arguments), dropped tags
  }
}

void K3OutputParser::message_text(std::string_view text) {
  if (!message_text_) {
    if (text.find_first_not_of(kSpace) == std::string_view::npos) {
      space_ += text;
      return;
    }
    message_text_ = true;
    add_content(space_);
    space_.clear();
  }
  add_content(text);
}

void K3OutputParser::on_end() {
  while (!stack_.empty()) pop();
  mode_ = Mode::kBody;
  end_message();
}

bool K3OutputParser::pop_above(Tag tag) {
  size_t i = stack_.size();
  while (i > 0 && stack_[i - 1].tag != tag) --i;
  if (i == 0) return false;
  while (stack_.size() > i) pop();
  return true;
}

void K3OutputParser::open_tag(std::string_view header) {
  header = trim_space(header);
  if (header.empty()) return;
  const std::string tag(header.substr(0, header.find_first_of(kSpace)));
  if (tag == "think" || tag == "response" || tag == "tools") {
    pop_above(Tag::kMessage);
    stack_.push_back({tag == "think" ? Tag::kThink : tag == "response" ? Tag::kResponse : Tag::kTools, tag});
  } else if (tag == "call") {
    if (!pop_above(Tag::kTools)) {
      pop_above(Tag::kMessage);
      stack_.push_back({Tag::kTools, "tools"});
    }
    stack_.push_back({Tag::kCall, tag});
    call_ = OpenCall{};
    std::string tool = attribute(header, "tool");
    if (tool.empty()) return;  // a call without a tool name is dropped
    call_.active = true;
    start_call(call_id_prefix_ + std::to_string(calls() + 1), std::move(tool));
  } else if (tag == "argument" || tag == "json") {
    if (!pop_above(Tag::kCall)) {
      stack_.push_back({Tag::kDropped, tag});
      return;
    }
    stack_.push_back({tag == "json" ? Tag::kJson : Tag::kArgument, tag});
    if (!call_.active) return;
    if (tag == "json") {
      if (!call_.wrote) call_.raw = true;  // a json block supplies the arguments unless some came first
      return;
    }
    if (call_.raw) return;
    call_.in_argument = true;
    call_.arg_type = attribute(header, "type");
    call_.arg_value.clear();
    add_arguments((call_.wrote ? ", " : "{") + json_string(attribute(header, "key")) + ": " +
                  (call_.arg_type == "string" ? "\"" : ""));
    call_.wrote = true;
  } else {
    stack_.push_back({Tag::kUnknown, tag});
  }
}

void K3OutputParser::close_tag(std::string_view name) {
  name = trim_space(name);
  if (name.empty()) return;
  size_t i = stack_.size();
  while (i > 0 && stack_[i - 1].name != name) --i;
  if (i == 0) return;  // nothing open by that name
  while (stack_.size() >= i) pop();
  if (stack_.empty()) end_message();
}

void K3OutputParser::pop() {
  const Tag tag = stack_.back().tag;
  stack_.pop_back();
  if (tag == Tag::kArgument && call_.in_argument) {
    call_.in_argument = false;
    if (call_.arg_type == "string") {
      add_arguments("\"");
    } else {
      const std::optional<Json> v = parse_model_json(call_.arg_value);
      add_arguments(v ? dump_json(*v, JsonStyle::kPython) : json_string(call_.arg_value));
    }
  }
  if (tag == Tag::kCall && call_.active) {
    if (!call_.raw) add_arguments(call_.wrote ? "}" : "{}");
    if (call_.raw && !call_.wrote) add_arguments("{}");
    end_call();
    call_ = OpenCall{};
  }
}

ParsedMessage parse_k3_output(std::string_view text, bool thinking) {
  K3OutputParser parser(thinking);
  parser.feed(text);
  parser.finish();
  return parser.message();
}

}  // namespace k3::chat
