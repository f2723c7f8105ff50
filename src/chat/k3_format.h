// Kimi-K3 "XTML" chat format (tokenizer spec §5): rendering a request into segments and parsing
// the model's output back into reasoning, content and tool calls, incrementally.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/request.h"
#include "chat/segments.h"
#include "chat/stream_text.h"

namespace k3::chat {

// Markers (special tokens) of the K3 format.
inline constexpr std::string_view kOpen = "<|open|>";
inline constexpr std::string_view kClose = "<|close|>";
inline constexpr std::string_view kSep = "<|sep|>";
inline constexpr std::string_view kEndOfMsg = "<|end_of_msg|>";

// Throws k3::Error naming the field for requests the format cannot express (effort outside
// low/high/max, a tool message whose tool cannot be named, a json_schema without a schema).
std::vector<Segment> render_k3(const Request& request);

// Incremental parser of K3 output (text decoded with specials kept). Feed chunks split anywhere:
// the deltas never end inside a marker or a UTF-8 sequence, and the final result does not depend
// on where the input was split.
class K3OutputParser {
 public:
  // thinking: the prompt opened the think channel (else the response channel). Tool call ids are
  // call_id_prefix + running number from 1.
  explicit K3OutputParser(bool thinking, std::string call_id_prefix = "call_");
  // The special tokens the parser consumes: decode them even when skipping the others.
  static std::vector<std::string> markers();

  ChatDelta feed(std::string_view text);
  // Flushes what was held back and closes the stream: finish_reason "tool_calls" when a call
  // completed, "stop" when <|end_of_msg|> was seen, else "length". Incomplete calls are dropped.
  ParsedMessage finish();

 private:
  enum class Tag { kMessage, kThink, kResponse, kTools, kCall, kArgument, kJson, kOther };
  void on_marker(std::string_view marker, ChatDelta& delta);
  void on_text(std::string_view text, ChatDelta& delta);
  void on_header(ChatDelta& delta);
  void on_close(ChatDelta& delta);
  void emit_arguments(std::string_view fragment, ChatDelta& delta);

  MarkerSplitter splitter_;
  std::vector<Tag> stack_;
  enum class Mode { kBody, kOpenHeader, kCloseHeader, kEnded } mode_ = Mode::kBody;
  std::string header_;
  std::string call_id_prefix_;
  ParsedMessage result_;
  // The call being parsed.
  struct OpenCall {
    bool active = false;    // has a tool name: streamed
    std::string arguments;  // streamed so far
    int argument_count = 0;
    bool raw = false;       // a json block supplied the arguments
    std::string arg_type;   // type of the open argument
    std::string arg_value;  // non-string argument text
  } call_;
  size_t calls_started_ = 0;
};

ParsedMessage parse_k3_output(std::string_view text, bool thinking);

}  // namespace k3::chat
