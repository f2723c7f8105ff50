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

KimiLinearOutputParser::KimiLinearOutputParser() : OutputParser(markers()) {}

void KimiLinearOutputParser::on_marker(size_t index) {
  enum : size_t { kEnd, kBeginSection, kEndSection, kBeginCall, kBeginArguments, kEndCall };
  if (ended()) return;
  if (index == kBeginArguments && mode_ == Mode::kCallId) {
    const std::string id(trim_space(call_id_));
    call_active_ = !id.empty();
    if (call_active_) start_call(id, call_name(id));
    mode_ = Mode::kArguments;
    return;
  }
  if (call_active_) end_call();  // any other marker ends the arguments: the call is complete
  call_active_ = false;
  switch (index) {
    case kEnd: end_message(); break;
    case kBeginSection: mode_ = Mode::kSection; break;
    case kEndSection: mode_ = Mode::kContent; break;
    case kBeginCall:
      mode_ = Mode::kCallId;
      call_id_.clear();
      break;
    case kEndCall: mode_ = Mode::kSection; break;
    default: break;
  }
}

void KimiLinearOutputParser::on_end() {
  if (call_active_) end_call();
  call_active_ = false;
  end_message();
}

void KimiLinearOutputParser::on_text(std::string_view text) {
  if (ended()) return;
  if (mode_ == Mode::kContent) add_content(text);
  if (mode_ == Mode::kCallId) call_id_ += text;
  if (mode_ == Mode::kArguments && call_active_) add_arguments(text);
}

ParsedMessage parse_kimi_linear_output(std::string_view text) {
  KimiLinearOutputParser parser;
  parser.feed(text);
  parser.finish();
  return parser.message();
}

}  // namespace k3::chat
