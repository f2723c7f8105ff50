#include "chat/request.h"

#include "core/error.h"
#include "io/json.h"

namespace k3::chat {
namespace {

[[noreturn]] void fail(const std::string& field, const std::string& message) {
  throw Error(Where{"", "", field}, message);
}

std::string optional_string(const Json& obj, const char* key, const std::string& field) {
  if (!obj.contains(key) || obj[key].is_null()) return "";
  if (!obj[key].is_string()) fail(field + "." + key, "expected a string");
  return obj[key].get<std::string>();
}

std::vector<std::string> parse_content(const Json& msg, const std::string& field) {
  if (!msg.contains("content") || msg["content"].is_null()) return {};
  const Json& c = msg["content"];
  const std::string f = field + ".content";
  if (c.is_string()) return {c.get<std::string>()};
  if (!c.is_array()) fail(f, "expected a string or a list of parts");
  std::vector<std::string> parts;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string pf = f + "[" + std::to_string(i) + "]";
    if (!c[i].is_object() || !c[i].contains("type") || !c[i]["type"].is_string()) fail(pf, "expected a part with a \"type\"");
    const std::string type = c[i]["type"].get<std::string>();
    if (type == "image" || type == "image_url") fail(pf, "image parts are not supported by this text-only engine");
    if (type != "text") fail(pf + ".type", "unknown part type " + quote_bytes(type));
    if (!c[i].contains("text") || !c[i]["text"].is_string()) fail(pf + ".text", "expected a string");
    parts.push_back(c[i]["text"].get<std::string>());
  }
  return parts;
}

// Spec §5.3 (b): absent/null/blank → {}; object as is; JSON object text → parsed; other text → raw
// json block; JSON that is not an object → error.
void parse_arguments(const Json& fn, const std::string& field, ToolCall& call) {
  if (!fn.contains("arguments") || fn["arguments"].is_null()) return;
  const Json& a = fn["arguments"];
  if (a.is_object()) {
    call.arguments = a;
    return;
  }
  if (!a.is_string()) fail(field, "expected an object or a JSON string");
  const std::string& text = a.get_ref<const std::string&>();
  if (is_blank(text)) return;
  std::optional<Json> parsed = try_parse_json_value<Json>(text, Where{"", "", field});
  if (!parsed) {
    call.arguments = text;
    call.raw = true;
  } else if (parsed->is_object()) {
    call.arguments = std::move(*parsed);
  } else {
    fail(field, "JSON arguments must be an object");
  }
}

Message parse_message(const Json& msg, const std::string& field) {
  if (!msg.is_object()) fail(field, "expected an object");
  Message m;
  if (!msg.contains("role") || !msg["role"].is_string()) fail(field + ".role", "expected a string");
  m.role = msg["role"].get<std::string>();
  if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
    fail(field + ".role", "unknown role " + quote_bytes(m.role) + " (expected system, user, assistant or tool)");
  m.content = parse_content(msg, field);
  m.name = optional_string(msg, "name", field);
  if (m.role == "assistant") {
    m.reasoning = optional_string(msg, "reasoning_content", field);
    if (m.reasoning.empty()) m.reasoning = optional_string(msg, "reasoning", field);
    if (msg.contains("tool_calls") && !msg["tool_calls"].is_null()) {
      const Json& calls = msg["tool_calls"];
      if (!calls.is_array()) fail(field + ".tool_calls", "expected an array");
      for (size_t i = 0; i < calls.size(); ++i) {
        const std::string cf = field + ".tool_calls[" + std::to_string(i) + "]";
        if (!calls[i].is_object()) fail(cf, "expected an object");
        ToolCall call;
        call.id = optional_string(calls[i], "id", cf);
        if (!calls[i].contains("function") || !calls[i]["function"].is_object()) fail(cf + ".function", "expected an object");
        const Json& fn = calls[i]["function"];
        call.name = optional_string(fn, "name", cf + ".function");
        if (call.name.empty()) fail(cf + ".function.name", "expected a non-empty string");
        parse_arguments(fn, cf + ".function.arguments", call);
        m.tool_calls.push_back(std::move(call));
      }
    }
  }
  if (m.role == "tool") {
    m.tool_call_id = optional_string(msg, "tool_call_id", field);
    if (m.tool_call_id.empty()) m.tool_call_id = optional_string(msg, "id", field);
    m.tool = optional_string(msg, "tool", field);
    if (m.tool.empty()) m.tool = m.name;
  }
  if (m.role == "system" && msg.contains("tools") && !msg["tools"].is_null()) {
    if (!msg["tools"].is_array()) fail(field + ".tools", "expected an array");
    m.dynamic_tools = msg["tools"];
  }
  return m;
}

}  // namespace

bool is_blank(std::string_view s) { return s.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos; }

Request parse_request(std::string_view json_text, const std::string& file) {
  try {
    return request_from_json(parse_json_value<Json>(json_text, Where{file, "", ""}));
  } catch (const Error& e) {
    if (!e.where().file.empty() || file.empty()) throw;
    throw Error(Where{file, e.where().tensor, e.where().field}, e.detail());
  }
}

Request request_from_json(const Json& json) {
  Request r;
  const Json* messages = &json;
  if (json.is_object()) {
    if (!json.contains("messages")) fail("messages", "missing");
    messages = &json["messages"];
    if (json.contains("tools") && !json["tools"].is_null()) {
      if (!json["tools"].is_array()) fail("tools", "expected an array");
      r.tools = json["tools"];
    }
    if (json.contains("tool_choice") && !json["tool_choice"].is_null()) {
      const Json& tc = json["tool_choice"];
      if (!tc.is_string()) fail("tool_choice", "a named tool choice needs constrained decoding, which k3 does not do");
      r.tool_choice = tc.get<std::string>();
      if (r.tool_choice != "auto" && r.tool_choice != "required" && r.tool_choice != "none")
        fail("tool_choice", "expected auto, required or none, got " + quote_bytes(r.tool_choice));
    }
    if (json.contains("response_format") && !json["response_format"].is_null()) {
      const Json& rf = json["response_format"];
      if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
        fail("response_format.type", "expected a string");
      const std::string type = rf["type"].get<std::string>();
      if (type != "text" && type != "json_object" && type != "json_schema")
        fail("response_format.type", "expected text, json_object or json_schema, got " + quote_bytes(type));
      r.response_format = rf;
    }
    if (json.contains("chat_template_kwargs") && json["chat_template_kwargs"].is_object()) {
      const Json& kw = json["chat_template_kwargs"];
      for (const char* key : {"thinking", "enable_thinking"}) {
        if (!kw.contains(key)) continue;
        if (!kw[key].is_boolean()) fail(std::string("chat_template_kwargs.") + key, "expected a boolean");
        r.thinking = kw[key].get<bool>();
      }
    }
    if (json.contains("reasoning_effort") && !json["reasoning_effort"].is_null()) {
      if (!json["reasoning_effort"].is_string()) fail("reasoning_effort", "expected a string");
      const std::string effort = json["reasoning_effort"].get<std::string>();
      if (effort == "none") {
        r.thinking = false;
      } else if (effort == "low" || effort == "high" || effort == "max") {
        r.effort = effort;
      } else {
        fail("reasoning_effort", "expected none, low, high or max, got " + quote_bytes(effort));
      }
    }
  }
  if (!messages->is_array()) fail("messages", "expected an array");
  if (messages->empty()) fail("messages", "expected at least one message");
  for (size_t i = 0; i < messages->size(); ++i)
    r.messages.push_back(parse_message((*messages)[i], "messages[" + std::to_string(i) + "]"));
  return r;
}

}  // namespace k3::chat
