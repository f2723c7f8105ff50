// Pieces shared by the chat output parsers: the delta/result types and a splitter that cuts a
// streamed text into ordinary text and marker strings, holding back any tail that could still be
// the start of a marker or of a UTF-8 sequence.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/json_text.h"

namespace k3::chat {

struct ToolCallDelta {
  size_t index = 0;       // 0-based position among the message's calls (OpenAI "index")
  std::string id;         // set on the first delta of a call, with name
  std::string name;
  std::string arguments;  // a fragment of the arguments JSON text
};

struct ChatDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning_content.empty() && content.empty() && tool_calls.empty(); }
  void add_arguments(size_t index, std::string_view fragment);
};

struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

struct ParsedMessage {
  std::optional<std::string> reasoning_content;  // absent when empty
  std::optional<std::string> content;            // null when empty
  std::vector<ParsedToolCall> tool_calls;
  std::string finish_reason;  // stop | tool_calls | length
  // The OpenAI assistant message: {"role","content","reasoning_content"?,"tool_calls"?}.
  Json to_json() const;
};

class MarkerSplitter {
 public:
  using Sink = std::function<void(bool is_marker, std::string_view text)>;
  explicit MarkerSplitter(std::vector<std::string> markers) : markers_(std::move(markers)) {}
  void feed(std::string_view text, const Sink& sink);
  // End of input: an incomplete UTF-8 tail becomes U+FFFD; a partial marker at the tail is dropped.
  void finish(const Sink& sink);

 private:
  std::vector<std::string> markers_;
  std::string pending_;
};

}  // namespace k3::chat
