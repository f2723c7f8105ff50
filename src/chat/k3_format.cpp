#include "chat/k3_format.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "core/error.h"

namespace k3::chat {
namespace {

using Attrs = std::vector<std::pair<std::string, std::string>>;

std::string escape_attr(std::string_view v) {  // & first, then "
  std::string out;
  for (char c : v) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape_attr(std::string v) {  // &quot; first, then &amp;
  for (auto [from, to] : {std::pair{"&quot;", "\""}, std::pair{"&amp;", "&"}}) {
    std::string out;
    const std::string_view f = from;
    for (size_t i = 0; i < v.size();) {
      if (v.compare(i, f.size(), f) == 0) {
        out += to;
        i += f.size();
      } else {
        out += v[i++];
      }
    }
    v = std::move(out);
  }
  return v;
}

void open(Segments& s, const std::string& tag, const Attrs& attrs = {}) {
  s.control(std::string(kOpen));
  s.text(tag);
  for (const auto& [key, value] : attrs) {
    s.text(" " + key);
    s.text("=\"");
    s.text(escape_attr(value));
    s.text("\"");
  }
  s.control(std::string(kSep));
}

void close(Segments& s, const std::string& tag) {
  s.control(std::string(kClose));
  s.text(tag);
  s.control(std::string(kSep));
}

void end_message(Segments& s) {
  close(s, "message");
  s.control(std::string(kEndOfMsg));
}

void system_block(Segments& s, const std::string& type, const std::string& body) {
  open(s, "message", {{"role", "system"}, {"type", type}});
  s.text(body);
  end_message(s);
}

std::string tools_body(const Json& tools) {
  return "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" +
         dump_json(sorted_keys(tools), JsonStyle::kCompact) + "\n```";
}

std::string dynamic_tools_body(const Json& tools) {
  return "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\nYou have access to all "
         "existing and extended tools.\nHere are the specs for the extended tools.\n\n```json\n" +
         dump_json(sorted_keys(tools), JsonStyle::kCompact) + "\n```";
}

std::string effort_body(const std::string& effort) {
  return "`thinking_effort` guides on how much to think in your thinking channel (not including the response "
         "channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with "
         "`thinking_effort=" +
         effort + "`.";
}

const char* kRequired = "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.";
const char* kNone = "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.";
const char* kJsonObject =
    "The system is invoked with `response_format=json_object`.\nYour response must be raw JSON data without markdown "
    "code blocks (```json) or any additional formatting.";

std::string json_schema_body(const Json& response_format) {
  const Json& js = response_format.contains("json_schema") ? response_format["json_schema"] : Json();
  if (!js.is_object()) throw Error(Where{"", "", "response_format.json_schema"}, "expected an object");
  const Json& schema = js.contains("schema") ? js["schema"] : js.contains("json_schema") ? js["json_schema"] : js;
  return std::string(kJsonObject).replace(std::string(kJsonObject).find("json_object"), 11, "json_schema") +
         "\nThe JSON data must match the following schema:\n```json\n" +
         dump_json(sorted_keys(schema), JsonStyle::kCompact) + "\n```";
}

std::string argument_type(const Json& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_object()) return "object";
  return "array";
}

void assistant_body(Segments& s, const Message& m, bool thinking) {
  if (thinking) {
    open(s, "think");
    if (!is_blank(m.reasoning)) s.text(m.reasoning);
    close(s, "think");
  }
  open(s, "response");
  for (const auto& part : m.content) s.text(part);
  close(s, "response");
  if (m.tool_calls.empty()) return;
  open(s, "tools");
  for (size_t k = 0; k < m.tool_calls.size(); ++k) {
    const ToolCall& call = m.tool_calls[k];
    open(s, "call", {{"tool", call.name}, {"index", std::to_string(k + 1)}});
    if (call.raw) {
      open(s, "json", {{"type", "object"}});
      s.text(call.arguments.get<std::string>());
      close(s, "json");
    } else {
      for (const auto& [key, value] : call.arguments.items()) {
        open(s, "argument", {{"key", key}, {"type", argument_type(value)}});
        s.text(value.is_string() ? value.get<std::string>() : dump_json(value, JsonStyle::kPython));
        close(s, "argument");
      }
    }
    close(s, "call");
  }
  close(s, "tools");
}

// Spec §5.5: a run of tool messages that all match the preceding assistant's call ids is put in
// call order and named after the calls.
std::vector<Message> reorder_tool_results(const std::vector<Message>& in) {
  std::vector<Message> out = in;
  const Message* assistant = nullptr;
  for (size_t i = 0; i < out.size();) {
    if (out[i].role != "tool") {
      if (out[i].role == "assistant") assistant = &in[i];
      ++i;
      continue;
    }
    size_t end = i;
    while (end < out.size() && out[end].role == "tool") ++end;
    if (assistant) {
      std::vector<std::pair<size_t, size_t>> order;  // (call position, message)
      for (size_t t = i; t < end; ++t) {
        const auto& calls = assistant->tool_calls;
        auto it = std::find_if(calls.begin(), calls.end(), [&](const ToolCall& c) { return !c.id.empty() && c.id == out[t].tool_call_id; });
        if (it == calls.end()) break;
        order.push_back({static_cast<size_t>(it - calls.begin()), t});
      }
      if (order.size() == end - i) {
        std::stable_sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first < b.first; });
        std::vector<Message> run;
        for (auto [j, t] : order) {
          Message m = out[t];
          m.tool = assistant->tool_calls[j].name;
          if (!m.name.empty()) m.name = m.tool;
          run.push_back(std::move(m));
        }
        std::move(run.begin(), run.end(), out.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    i = end;
  }
  return out;
}

}  // namespace

std::vector<Segment> render_k3(const Request& request) {
  Segments s;
  if (!request.tools.empty()) system_block(s, "tool-declare", tools_body(request.tools));
  if (request.thinking && !request.effort.empty()) {
    if (request.effort != "low" && request.effort != "high" && request.effort != "max")
      throw Error(Where{"", "", "reasoning_effort"}, "expected low, high or max, got " + quote_bytes(request.effort));
    system_block(s, "thinking-effort", effort_body(request.effort));
  }
  const std::vector<Message> messages = reorder_tool_results(request.messages);
  const Message* assistant = nullptr;
  size_t tool_counter = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    Attrs attrs = {{"role", m.role}};
    if (m.role == "system" && !m.dynamic_tools.is_null()) {
      system_block(s, "tool-declare", dynamic_tools_body(m.dynamic_tools));
      continue;
    }
    if (m.role == "tool") {
      ++tool_counter;
      std::string tool = m.tool;
      if (tool.empty() && assistant && tool_counter <= assistant->tool_calls.size())
        tool = assistant->tool_calls[tool_counter - 1].name;
      if (tool.empty())
        throw Error(Where{"", "", "messages[" + std::to_string(i) + "]"},
                    "tool result has no tool name and matches no call of the preceding assistant message");
      attrs.push_back({"tool", tool});
      attrs.push_back({"index", std::to_string(tool_counter)});
    } else if (!m.name.empty()) {
      attrs.push_back({"name", m.name});
    }
    open(s, "message", attrs);
    if (m.role == "assistant") {
      assistant_body(s, m, request.thinking);
      assistant = &m;
      tool_counter = 0;
    } else {
      for (const auto& part : m.content) s.text(part);
    }
    end_message(s);
  }
  if (request.tool_choice == "required") system_block(s, "tool-choice", kRequired);
  if (request.tool_choice == "none") system_block(s, "tool-choice", kNone);
  if (request.response_format.is_object()) {
    const std::string type = request.response_format["type"].get<std::string>();
    if (type == "json_object") system_block(s, "response-format", kJsonObject);
    if (type == "json_schema") system_block(s, "response-format", json_schema_body(request.response_format));
  }
  if (request.add_generation_prompt) {
    open(s, "message", {{"role", "assistant"}});
    open(s, request.thinking ? "think" : "response");
  }
  return s.list();
}

// ---- output parser ---------------------------------------------------------------------------

std::vector<std::string> K3OutputParser::markers() {
  return {std::string(kOpen), std::string(kClose), std::string(kSep), std::string(kEndOfMsg)};
}

K3OutputParser::K3OutputParser(bool thinking, std::string call_id_prefix)
    : splitter_(markers()),
      stack_{Tag::kMessage, thinking ? Tag::kThink : Tag::kResponse},
      call_id_prefix_(std::move(call_id_prefix)) {}

ChatDelta K3OutputParser::feed(std::string_view text) {
  ChatDelta delta;
  splitter_.feed(text, [&](bool marker, std::string_view t) { marker ? on_marker(t, delta) : on_text(t, delta); });
  return delta;
}

ParsedMessage K3OutputParser::finish() {
  ChatDelta ignored;
  splitter_.finish([&](bool marker, std::string_view t) { marker ? on_marker(t, ignored) : on_text(t, ignored); });
  if (call_.active) result_.tool_calls.pop_back();  // truncated inside a call: dropped
  call_ = OpenCall{};
  if (result_.reasoning_content && result_.reasoning_content->empty()) result_.reasoning_content.reset();
  if (result_.content && result_.content->empty()) result_.content.reset();
  result_.finish_reason = !result_.tool_calls.empty() ? "tool_calls" : mode_ == Mode::kEnded ? "stop" : "length";
  return result_;
}

void K3OutputParser::on_marker(std::string_view marker, ChatDelta& delta) {
  if (mode_ == Mode::kEnded) return;
  if (marker == kOpen) {
    mode_ = Mode::kOpenHeader;
    header_.clear();
  } else if (marker == kClose) {
    mode_ = Mode::kCloseHeader;
    header_.clear();
  } else if (marker == kSep) {
    if (mode_ == Mode::kOpenHeader) on_header(delta);
    if (mode_ == Mode::kCloseHeader) on_close(delta);
    mode_ = Mode::kBody;
  } else if (marker == kEndOfMsg) {
    mode_ = Mode::kEnded;
  }
}

void K3OutputParser::emit_arguments(std::string_view fragment, ChatDelta& delta) {
  call_.arguments += fragment;
  delta.add_arguments(calls_started_ - 1, fragment);
}

void K3OutputParser::on_text(std::string_view text, ChatDelta& delta) {
  if (mode_ == Mode::kEnded) return;
  if (mode_ != Mode::kBody) {
    header_ += text;
    return;
  }
  switch (stack_.empty() ? Tag::kOther : stack_.back()) {
    case Tag::kThink:
      delta.reasoning_content += text;
      result_.reasoning_content = result_.reasoning_content.value_or("") + std::string(text);
      break;
    case Tag::kMessage:  // text outside channels counts as content
    case Tag::kResponse:
      delta.content += text;
      result_.content = result_.content.value_or("") + std::string(text);
      break;
    case Tag::kArgument:
      if (!call_.active) break;
      if (call_.arg_type == "string") {
        emit_arguments(escape_json_text(text), delta);
      } else {
        call_.arg_value += text;
      }
      break;
    case Tag::kJson:
      if (call_.active) emit_arguments(text, delta);
      break;
    default: break;  // whitespace between blocks, unknown tags
  }
}

void K3OutputParser::on_header(ChatDelta& delta) {
  const size_t space = header_.find(' ');
  const std::string tag = header_.substr(0, space);
  std::map<std::string, std::string> attrs;  // (\w+)="([^"]*)"
  for (size_t eq = header_.find("=\""); eq != std::string::npos; eq = header_.find("=\"", eq + 1)) {
    size_t k = eq;
    while (k > 0 && (std::isalnum(static_cast<unsigned char>(header_[k - 1])) || header_[k - 1] == '_')) --k;
    const size_t close = header_.find('"', eq + 2);
    if (k == eq || close == std::string::npos) continue;
    attrs.emplace(header_.substr(k, eq - k), unescape_attr(header_.substr(eq + 2, close - eq - 2)));
    eq = close;
  }
  Tag t = Tag::kOther;
  if (tag == "message") t = Tag::kMessage;
  if (tag == "think") t = Tag::kThink;
  if (tag == "response") t = Tag::kResponse;
  if (tag == "tools") t = Tag::kTools;
  if (tag == "call") {
    t = Tag::kCall;
    call_ = OpenCall{};
    if (!attrs["tool"].empty()) {
      call_.active = true;
      ++calls_started_;
      delta.tool_calls.push_back({calls_started_ - 1, call_id_prefix_ + std::to_string(calls_started_), attrs["tool"], ""});
      result_.tool_calls.push_back({call_id_prefix_ + std::to_string(calls_started_), attrs["tool"], ""});
    }
  }
  if (tag == "argument") {
    t = Tag::kArgument;
    if (call_.active && !call_.raw) {
      call_.arg_type = attrs["type"];
      call_.arg_value.clear();
      emit_arguments((call_.argument_count++ == 0 ? "{" : ", ") + json_string(attrs["key"]) + ": " +
                         (call_.arg_type == "string" ? "\"" : ""),
                     delta);
    }
  }
  if (tag == "json") {
    t = Tag::kJson;
    if (call_.active && call_.argument_count == 0) call_.raw = true;
  }
  stack_.push_back(t);
}

void K3OutputParser::on_close(ChatDelta& delta) {
  static const std::map<std::string, Tag, std::less<>> tags = {
      {"message", Tag::kMessage}, {"think", Tag::kThink}, {"response", Tag::kResponse}, {"tools", Tag::kTools},
      {"call", Tag::kCall},       {"argument", Tag::kArgument}, {"json", Tag::kJson}};
  auto it = tags.find(header_);
  const Tag t = it == tags.end() ? Tag::kOther : it->second;
  if (std::find(stack_.begin(), stack_.end(), t) == stack_.end()) return;  // nothing to close
  while (!stack_.empty()) {
    const Tag top = stack_.back();
    stack_.pop_back();
    if (top == Tag::kArgument && call_.active && !call_.raw) {
      if (call_.arg_type == "string") {
        emit_arguments("\"", delta);
      } else {
        const std::optional<Json> v = parse_model_json(call_.arg_value);
        emit_arguments(v ? dump_json(*v, JsonStyle::kPython) : json_string(call_.arg_value), delta);
      }
    }
    if (top == Tag::kCall && call_.active) {
      if (!call_.raw) emit_arguments(call_.argument_count == 0 ? "{}" : "}", delta);
      result_.tool_calls.back().arguments = call_.arguments;
      call_ = OpenCall{};
    }
    if (top == t) break;
  }
}

ParsedMessage parse_k3_output(std::string_view text, bool thinking) {
  K3OutputParser parser(thinking);
  parser.feed(text);
  return parser.finish();
}

}  // namespace k3::chat
