// What the chat output parsers share: the delta/result types and the input side of a parser.
//
// A parser reads a reply as pieces: ordinary text (the bytes of ordinary tokens, split anywhere)
// and markers (its format's special tokens, by index into its marker list). The pieces come from
// token ids (chat/token_pieces.h: a marker is only ever a marker id, so text that spells a marker
// name stays text) or, where only text is at hand, from text with the marker names spelled out
// (feed(): names are found in the text; a partial name at a chunk's end waits for the next chunk,
// and one at the very end is dropped).
//
// Contract, tested as a property: message() and the deltas depend only on the sequence of markers
// and the text between them, never on where that text was split; each field of message() is
// exactly the concatenation of its deltas (finish()'s included); fields only ever hold ordinary
// text (valid UTF-8, an invalid sequence becomes U+FFFD), never a marker.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/json_text.h"
#include "tokenizer/utf8.h"

namespace k3::chat {

struct ToolCallDelta {
  size_t index = 0;       // 0-based position among the message's calls (OpenAI "index")
  std::string id;         // set (never empty) on the first delta of a call, with name
  std::string name;
  std::string arguments;  // a fragment of the arguments JSON text
};

struct ChatDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning_content.empty() && content.empty() && tool_calls.empty(); }
  void add_arguments(size_t index, std::string_view fragment);
  void append(const ChatDelta& later);  // merges a later delta into this one
};

struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text (as streamed: incomplete when the reply was cut inside the call)
  bool complete = true;   // false: the reply was cut inside this call (set by OutputParser::finish)
};

struct ParsedMessage {
  std::optional<std::string> reasoning_content;  // absent when empty
  std::optional<std::string> content;            // null when empty
  std::vector<ParsedToolCall> tool_calls;
  std::string finish_reason;  // stop | tool_calls | length
  // Joins a delta on, as a client joins streamed deltas.
  void add(const ChatDelta& delta);
  // The OpenAI assistant message: {"role","content","reasoning_content"?,"tool_calls"?}.
  Json to_json() const;
};

// s without leading and trailing ASCII whitespace.
std::string_view trim_space(std::string_view s);

class OutputParser {
 public:
  virtual ~OutputParser() = default;

  // Ordinary text: bytes split anywhere (an incomplete UTF-8 tail waits for the next piece).
  ChatDelta text(std::string_view bytes);
  // markers()[index] of the format.
  ChatDelta marker(size_t index);
  // Text with the marker names spelled out (no ids at hand).
  ChatDelta feed(std::string_view text);
  // End of the reply; returns the last delta. `ended`: a stop token the parser was not given ended
  // the reply (the format's own end marker, when given, counts by itself). finish_reason: the
  // reply ended → "tool_calls" when it holds a call, else "stop"; otherwise (cut short) "length",
  // with a call the cut fell inside kept as streamed so far.
  ChatDelta finish(bool ended = false);

  // The deltas so far joined (ParsedMessage::add); complete after finish().
  const ParsedMessage& message() const { return message_; }
  const std::vector<std::string>& marker_names() const { return markers_; }

 protected:
  // `markers`: the format's special-token names; none may be a prefix of another.
  explicit OutputParser(std::vector<std::string> markers) : markers_(std::move(markers)) {}

  virtual void on_marker(size_t index) = 0;
  virtual void on_text(std::string_view text) = 0;  // whole code points, never empty
  virtual void on_end() = 0;  // the reply ended: close what is open, then call end_message()

  // What the format found, added to the current delta.
  void add_reasoning(std::string_view text) { delta_.reasoning_content += text; }
  void add_content(std::string_view text) { delta_.content += text; }
  void start_call(std::string id, std::string name);  // id: not empty
  void end_call() { call_open_ = false; }             // the last started call is complete
  void add_arguments(std::string_view fragment) { delta_.add_arguments(calls_ - 1, fragment); }  // to the last call
  size_t calls() const { return calls_; }  // calls started
  void end_message() { ended_ = true; }
  bool ended() const { return ended_; }

 private:
  void flush_utf8();
  ChatDelta take();

  std::vector<std::string> markers_;
  std::string held_;   // feed(): a tail that may be the start of a marker name
  utf8::Stream utf8_;  // text(): an incomplete UTF-8 tail
  ChatDelta delta_;
  ParsedMessage message_;
  size_t calls_ = 0;
  bool call_open_ = false;
  bool ended_ = false;
};

}  // namespace k3::chat
