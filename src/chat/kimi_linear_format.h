// Kimi-Linear (Kimi-K2 family) chat format, tokenizer spec §4: <|im_system|>/<|im_user|>/
// <|im_assistant|> ROLE <|im_middle|> content <|im_end|>, tool calls in a <|tool_calls_section_*|>.
// [UNCONFIRMED] against the shipped chat_template.jinja: default system text, JSON key order and
// separators of the tool declaration and of object arguments (k3: sorted keys; compact for the
// declaration, ", "/": " for arguments).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/request.h"
#include "chat/segments.h"
#include "chat/stream_text.h"

namespace k3::chat {

std::vector<Segment> render_kimi_linear(const Request& request);

// Incremental parser of Kimi-Linear output: content until <|im_end|>, K2-style tool calls
// (id "functions.NAME:N" → name NAME; the id is kept as the call id, arguments streamed raw).
class KimiLinearOutputParser {
 public:
  KimiLinearOutputParser();
  // The special tokens the parser consumes: decode them even when skipping the others.
  static std::vector<std::string> markers();
  ChatDelta feed(std::string_view text);
  ParsedMessage finish();

 private:
  void on_marker(std::string_view marker, ChatDelta& delta);
  void on_text(std::string_view text, ChatDelta& delta);

  MarkerSplitter splitter_;
  enum class Mode { kContent, kSection, kCallId, kArguments, kEnded } mode_ = Mode::kContent;
  std::string call_id_;
  bool call_open_ = false;
  ParsedMessage result_;
};

ParsedMessage parse_kimi_linear_output(std::string_view text);

}  // namespace k3::chat
