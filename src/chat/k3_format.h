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

// Incremental parser of K3 output (tokenizer spec §5.6–§5.8), an OutputParser (chat/stream_text.h:
// pieces in, deltas out, the same result for every split). Policies (docs/chat-format.md):
// - the stack starts as [message, think] (thinking) or [message, response]; text in think is
//   reasoning, in response content, in an argument its value, in a json block the raw arguments;
// - opening think/response/tools closes the channel that is open (a reply may leave think by
//   opening response or tools directly); a call outside tools opens tools;
// - closing the message, <|end_of_msg|>, or finish(true) closes every open channel and call; a
//   close that matches nothing open is ignored;
// - text directly inside the message is content, but a run of it that is only whitespace
//   (between blocks) is dropped; text in tools/call outside arguments is dropped;
// - unknown tags are transparent (their text goes where the enclosing channel's goes); argument or
//   json outside a call, and the contents of a call without a tool name, are dropped;
// - a header is ended by <|sep|> (or, leniently, by the next marker); a header cut off by the end
//   of the reply is dropped;
// - tool calls are returned whether or not the request declared tools: markup never reaches content.
class K3OutputParser final : public OutputParser {
 public:
  // thinking: the prompt opened the think channel (else the response channel). Tool call ids are
  // call_id_prefix + running number from 1.
  explicit K3OutputParser(bool thinking, std::string call_id_prefix = "call_");
  // The format's markers, in marker() index order: <|open|> <|close|> <|sep|> <|end_of_msg|>.
  static std::vector<std::string> markers();

 private:
  enum class Tag { kMessage, kThink, kResponse, kTools, kCall, kArgument, kJson, kDropped, kUnknown };
  struct Frame {
    Tag tag;
    std::string name;
  };
  void on_marker(size_t index) override;
  void on_text(std::string_view text) override;
  void on_end() override;
  void open_tag(std::string_view header);
  void close_tag(std::string_view name);
  // Pops frames above the innermost `tag` frame (all but the bottom one when there is none);
  // whether one was found.
  bool pop_above(Tag tag);
  void pop();  // the top frame, finishing the argument or call it holds
  void message_text(std::string_view text);

  std::vector<Frame> stack_;
  enum class Mode { kBody, kOpenHeader, kCloseHeader } mode_ = Mode::kBody;
  std::string header_;
  std::string space_;          // a whitespace-only run of text directly inside the message
  bool message_text_ = false;  // the current run has non-whitespace: it is content
  std::string call_id_prefix_;
  struct OpenCall {
    bool active = false;    // has a tool name: streamed
    bool raw = false;       // a json block supplies the arguments
    bool wrote = false;     // any argument (or raw text) was written
    bool in_argument = false;
    std::string arg_type;   // type of the open argument
    std::string arg_value;  // non-string argument text
  } call_;
};

// The whole output as text with marker names spelled out.
ParsedMessage parse_k3_output(std::string_view text, bool thinking);

}  // namespace k3::chat
