// A chat request (OpenAI-style messages, tools and options) validated into plain values. Every
// malformed field is a one-line k3::Error naming it, e.g. "field 'messages[2].content': ...".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/json_text.h"

namespace k3::chat {

struct ToolCall {
  std::string id;
  std::string name;
  Json arguments = Json::object();  // an object, or (raw == true) the unparsable text as a string
  bool raw = false;
};

struct Message {
  std::string role;                  // system | user | assistant | tool
  std::vector<std::string> content;  // text parts, in order
  std::string name;
  std::string reasoning;             // assistant: reasoning_content, else reasoning
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool: tool_call_id, else id
  std::string tool;                  // tool: the "tool" key, else "name"
  Json dynamic_tools;                // system: a "tools" field (null when absent)
};

struct Request {
  std::vector<Message> messages;
  Json tools = Json::array();
  std::string tool_choice = "auto";  // auto | required | none
  Json response_format;              // null or {"type": ...}
  bool thinking = true;
  std::string effort = "max";        // low | high | max; empty = no effort note
  bool add_generation_prompt = true;
  bool parallel_tool_calls = true;   // false: at most one call per reply (constrained replies)
};

// Accepts {"messages": [...], "tools": ..., "tool_choice": ..., "response_format": ...,
// "reasoning_effort": ..., "chat_template_kwargs": {"thinking": bool}} or a bare messages array,
// with at least one message. JSON limits and error forms are io/json.h parse_json_value's; `file`
// (the request's source) prefixes every error.
Request parse_request(std::string_view json_text, const std::string& file = "");
Request request_from_json(const Json& json);

// True when text is empty or only ASCII whitespace (Python str.isspace on ASCII).
bool is_blank(std::string_view text);

}  // namespace k3::chat
