#include "chat/kimi_linear_format.h"

namespace k3::chat {
namespace {

constexpr std::string_view kImSystem = "<|im_system|>", kImUser = "<|im_user|>", kImAssistant = "<|im_assistant|>",
                           kImMiddle = "<|im_middle|>", kImEnd = "<|im_end|>",
                           kSectionBegin = "<|tool_calls_section_begin|>", kSectionEnd = "<|tool_calls_section_end|>",
                           kCallBegin = "<|tool_call_begin|>", kArgumentBegin = "<|tool_call_argument_begin|>",
                           kCallEnd = "<|tool_call_end|>";

void turn(Segments& s, std::string_view marker, const std::string& role) {
  s.control(std::string(marker));
  s.text(role);
  s.control(std::string(kImMiddle));
}

std::string call_name(const std::string& id) {  // functions.NAME:N → NAME
  std::string name = id.rfind("functions.", 0) == 0 ? id.substr(10) : id;
  const size_t colon = name.rfind(':');
  return colon == std::string::npos ? name : name.substr(0, colon);
}

}  // namespace

std::vector<Segment> render_kimi_linear(const Request& request) {
  Segments s;
  if (!request.tools.empty()) {
    turn(s, kImSystem, "tool_declare");
    s.text(dump_json(sorted_keys(request.tools), JsonStyle::kCompact));
    s.control(std::string(kImEnd));
  }
  if (request.messages.empty() || request.messages[0].role != "system") {
    turn(s, kImSystem, "system");
    s.text("You are a helpful assistant");
    s.control(std::string(kImEnd));
  }
  for (const Message& m : request.messages) {
    const std::string_view marker = m.role == "user" ? kImUser : m.role == "assistant" ? kImAssistant : kImSystem;
    turn(s, marker, m.name.empty() ? m.role : m.name);
    if (m.role == "tool") s.text("## Return of " + m.tool_call_id + "\n");
    for (const auto& part : m.content) s.text(part);
    if (!m.tool_calls.empty()) {
      s.control(std::string(kSectionBegin));
      for (const ToolCall& call : m.tool_calls) {
        s.control(std::string(kCallBegin));
        s.text(call.id);
        s.control(std::string(kArgumentBegin));
        s.text(call.raw ? call.arguments.get<std::string>() : dump_json(sorted_keys(call.arguments), JsonStyle::kPython));
        s.control(std::string(kCallEnd));
      }
      s.control(std::string(kSectionEnd));
    }
    s.control(std::string(kImEnd));
  }
  if (request.add_generation_prompt) turn(s, kImAssistant, "assistant");
  return s.list();
}

std::vector<std::string> KimiLinearOutputParser::markers() {
  return {std::string(kImEnd),     std::string(kSectionBegin),  std::string(kSectionEnd),
          std::string(kCallBegin), std::string(kArgumentBegin), std::string(kCallEnd)};
}

KimiLinearOutputParser::KimiLinearOutputParser() : splitter_(markers()) {}

ChatDelta KimiLinearOutputParser::feed(std::string_view text) {
  ChatDelta delta;
  splitter_.feed(text, [&](bool marker, std::string_view t) { marker ? on_marker(t, delta) : on_text(t, delta); });
  return delta;
}

ParsedMessage KimiLinearOutputParser::finish() {
  ChatDelta ignored;
  splitter_.finish([&](bool marker, std::string_view t) { marker ? on_marker(t, ignored) : on_text(t, ignored); });
  if (call_open_) result_.tool_calls.pop_back();  // truncated inside a call: dropped
  call_open_ = false;
  if (result_.content && result_.content->empty()) result_.content.reset();
  result_.finish_reason = !result_.tool_calls.empty() ? "tool_calls" : mode_ == Mode::kEnded ? "stop" : "length";
  return result_;
}

void KimiLinearOutputParser::on_marker(std::string_view marker, ChatDelta& delta) {
  if (mode_ == Mode::kEnded) return;
  if (marker == kImEnd) {
    mode_ = Mode::kEnded;
  } else if (marker == kSectionBegin || marker == kSectionEnd) {
    mode_ = marker == kSectionBegin ? Mode::kSection : Mode::kContent;
  } else if (marker == kCallBegin) {
    mode_ = Mode::kCallId;
    call_id_.clear();
  } else if (marker == kArgumentBegin && mode_ == Mode::kCallId) {
    mode_ = Mode::kArguments;
    call_open_ = true;
    result_.tool_calls.push_back({call_id_, call_name(call_id_), ""});
    delta.tool_calls.push_back({result_.tool_calls.size() - 1, call_id_, call_name(call_id_), ""});
  } else if (marker == kCallEnd) {
    call_open_ = false;
    mode_ = Mode::kSection;
  }
}

void KimiLinearOutputParser::on_text(std::string_view text, ChatDelta& delta) {
  switch (mode_) {
    case Mode::kContent:
      delta.content += text;
      result_.content = result_.content.value_or("") + std::string(text);
      break;
    case Mode::kCallId: call_id_ += text; break;
    case Mode::kArguments:
      result_.tool_calls.back().arguments += text;
      delta.add_arguments(result_.tool_calls.size() - 1, text);
      break;
    default: break;
  }
}

ParsedMessage parse_kimi_linear_output(std::string_view text) {
  KimiLinearOutputParser parser;
  parser.feed(text);
  return parser.finish();
}

}  // namespace k3::chat
