#include "chat/k3_format.h"

#include <algorithm>
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

std::string value_argument_type(const Json& v) {
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
        open(s, "argument", {{"key", key}, {"type", value_argument_type(value)}});
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

}  // namespace k3::chat
