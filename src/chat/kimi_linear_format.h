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

// Incremental parser of Kimi-Linear output, an OutputParser (chat/stream_text.h): content until
// <|im_end|>, K2-style tool calls (id "functions.NAME:N" → name NAME; the id, trimmed, is kept as
// the call id; arguments streamed raw). Text inside the tool-call section but outside a call is
// dropped; a call begun outside a section is still a call; a call with an empty id is dropped;
// <|im_end|> (or finish(true)) inside a call completes it.
class KimiLinearOutputParser final : public OutputParser {
 public:
  KimiLinearOutputParser();
  // The format's markers, in marker() index order: <|im_end|> <|tool_calls_section_begin|>
  // <|tool_calls_section_end|> <|tool_call_begin|> <|tool_call_argument_begin|> <|tool_call_end|>.
  static std::vector<std::string> markers();

 private:
  void on_marker(size_t index) override;
  void on_text(std::string_view text) override;
  void on_end() override;

  enum class Mode { kContent, kSection, kCallId, kArguments } mode_ = Mode::kContent;
  std::string call_id_;
  bool call_active_ = false;  // the arguments being read belong to a started call
};

ParsedMessage parse_kimi_linear_output(std::string_view text);

}  // namespace k3::chat
