#include "server/api/responses_request.h"

#include <charconv>
#include <optional>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "server/api/request_fields.h"
#include "server/api_error.h"

namespace k3::server {
namespace {

using chat::Json;
using namespace request_fields;

std::string indexed(const std::string& base, size_t i) { return base + "[" + std::to_string(i) + "]"; }

// `prefix` + "N]" at the start of `s`: N, and s advanced past it.
std::optional<size_t> take_index(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return std::nullopt;
  size_t n = 0;
  const char* end = s.data() + s.size();
  const auto [p, ec] = std::from_chars(s.data() + prefix.size(), end, n);
  if (ec != std::errc() || p == end || *p != ']') return std::nullopt;
  s.remove_prefix(static_cast<size_t>(p + 1 - s.data()));
  return n;
}

const std::string& text_of(const Json& part, const std::string& name) {
  const Json* t = field(part, "text");
  if (!t || !t->is_string()) bad(name + ".text", "expected a string");
  return t->get_ref<const std::string&>();
}

// A message's (or a function output's) content: a string, or parts of the text types, which keep
// their boundaries (the chat formats render each part on its own). Parts become {type, text}.
Json text_content(const Json& content, const std::string& name) {
  if (content.is_string()) return content;
  if (!content.is_array()) bad(name, "expected a string or an array of content parts");
  Json parts = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string pn = indexed(name, i);
    const Json* type = content[i].is_object() ? field(content[i], "type") : nullptr;
    if (!type || !type->is_string()) bad(pn + ".type", "expected a string");
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "input_image" || t == "input_file" || t == "input_audio")
      bad(pn + ".type", quote_bytes(t) + " parts are not supported: this engine reads text only");
    if (t != "input_text" && t != "output_text") bad(pn + ".type", "expected input_text or output_text, got " + quote_bytes(t));
    parts.push_back(Json{{"type", t}, {"text", text_of(content[i], pn)}});
  }
  return parts;
}

std::string required_string(const Json& item, const char* key, const std::string& name) {
  const std::optional<std::string> v = string_field(item, key, name + "." + key);
  if (!v || v->empty()) bad(name + "." + key, "expected a non-empty string");
  return *v;
}

// A reasoning item's text: its content's reasoning_text parts, else its summary joined by blank lines.
std::string reasoning_item_text(const Json& item, const std::string& name) {
  std::string text;
  for (const char* key : {"content", "summary"}) {
    const Json* parts = field(item, key);
    if (!parts) continue;
    if (!parts->is_array()) bad(name + "." + key, "expected an array");
    std::string joined;
    for (size_t i = 0; i < parts->size(); ++i) {
      const std::string pn = indexed(name + "." + key, i);
      if (!(*parts)[i].is_object()) bad(pn, "expected an object");
      if (key == std::string("summary") && i > 0) joined += "\n\n";
      joined += text_of((*parts)[i], pn);
    }
    if (text.empty()) text = std::move(joined);
  }
  return text;
}

// One input item validated into its normalized form (only what rendering uses).
Json normalize_item(const Json& item, const std::string& name) {
  if (!item.is_object()) bad(name, "expected an object");
  const std::string type = string_field(item, "type", name + ".type").value_or("message");
  if (type == "message") {
    const std::string role = required_string(item, "role", name);
    if (role != "user" && role != "system" && role != "developer" && role != "assistant")
      bad(name + ".role", "expected user, system, developer or assistant, got " + quote_bytes(role));
    const Json* content = field(item, "content");
    if (!content) bad(name + ".content", "missing");
    return Json{{"type", "message"}, {"role", role}, {"content", text_content(*content, name + ".content")}};
  }
  if (type == "reasoning") {
    return Json{{"type", "reasoning"},
                {"summary", Json::array()},
                {"content", Json::array({Json{{"type", "reasoning_text"}, {"text", reasoning_item_text(item, name)}}})}};
  }
  if (type == "function_call") {
    return Json{{"type", "function_call"},
                {"call_id", required_string(item, "call_id", name)},
                {"name", required_string(item, "name", name)},
                {"arguments", string_field(item, "arguments", name + ".arguments").value_or("")}};
  }
  if (type == "function_call_output") {
    const Json* output = field(item, "output");
    if (!output) bad(name + ".output", "missing");
    return Json{{"type", "function_call_output"},
                {"call_id", required_string(item, "call_id", name)},
                {"output", text_content(*output, name + ".output")}};
  }
  unsupported(name + ".type", "input item type " + quote_bytes(type));
}

Json normalize_input(const Json& j) {
  const Json* input = field(j, "input");
  if (!input) bad("input", "missing");
  if (input->is_string()) return Json::array({Json{{"type", "message"}, {"role", "user"}, {"content", *input}}});
  if (!input->is_array()) bad("input", "expected a string or an array of items");
  Json items = Json::array();
  for (size_t i = 0; i < input->size(); ++i) items.push_back(normalize_item((*input)[i], indexed("input", i)));
  return items;
}

// Where a chat message came from, to name fields in errors.
struct Origin {
  std::string item;                // "input[3]", "instructions", "previous_response_id"
  std::string content;             // the item that gave its content
  std::vector<std::string> calls;  // the items of its tool calls
};

// Normalized items → chat messages (see the header): consecutive assistant items join.
class MessageBuilder {
 public:
  void add(const Json& item, const std::string& name) {
    const std::string& type = item["type"].get_ref<const std::string&>();
    if (type == "message" && item["role"] != "assistant") {
      push(Json{{"role", item["role"]}, {"content", chat_content(item["content"])}}, name);
    } else if (type == "function_call_output") {
      push(Json{{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", chat_content(item["output"])}}, name);
    } else if (type == "reasoning") {
      Json& m = assistant(name, [](const Json& m) { return m.contains("reasoning_content") || has_reply(m); });
      m["reasoning_content"] = item["content"][0]["text"];
    } else if (type == "message") {
      Json& m = assistant(name, has_reply);
      m["content"] = chat_content(item["content"]);
      origins_.back().content = name;
    } else {  // function_call
      Json& m = assistant(name, [](const Json&) { return false; });
      m["tool_calls"].push_back(Json{{"id", item["call_id"]},
                                     {"type", "function"},
                                     {"function", Json{{"name", item["name"]}, {"arguments", item["arguments"]}}}});
      origins_.back().calls.push_back(name);
    }
  }

  Json messages() const { return messages_; }

  // A chat field name → the Responses field it came from.
  std::string responses_name(const std::string& param) const {
    std::string_view rest = param;
    const std::optional<size_t> m = take_index(rest, "messages[");
    if (!m) return param == "messages" ? "input" : param;
    if (*m >= origins_.size()) return "input";
    const Origin& o = origins_[*m];
    if (const std::optional<size_t> k = take_index(rest, ".tool_calls[")) {
      if (rest.starts_with(".function")) rest.remove_prefix(9);
      return (*k < o.calls.size() ? o.calls[*k] : o.item) + std::string(rest);
    }
    if (rest.starts_with(".content")) return (o.content.empty() ? o.item : o.content) + std::string(rest);
    return o.item + std::string(rest);
  }

  void close() { open_ = false; }

 private:
  static bool has_reply(const Json& m) { return !m["content"].is_null() || m.contains("tool_calls"); }

  // Chat parts are {"type": "text"}.
  static Json chat_content(const Json& content) {
    if (content.is_string()) return content;
    Json parts = Json::array();
    for (const Json& p : content) parts.push_back(Json{{"type", "text"}, {"text", p["text"]}});
    return parts;
  }

  void push(Json message, const std::string& name) {
    messages_.push_back(std::move(message));
    origins_.push_back(Origin{name, name, {}});
    open_ = false;
  }

  // The open assistant message, or a new one when none is open or `full` says it cannot take more.
  template <class Full>
  Json& assistant(const std::string& name, Full full) {
    if (!open_ || full(messages_.back())) {
      push(Json{{"role", "assistant"}, {"content", nullptr}}, name);
      open_ = true;
    }
    return messages_.back();
  }

  Json messages_ = Json::array();
  std::vector<Origin> origins_;
  bool open_ = false;
};

Json function_tools(const Json& j) {
  const Json* tools = field(j, "tools");
  if (!tools) return Json::array();
  if (!tools->is_array()) bad("tools", "expected an array");
  Json out = Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string name = indexed("tools", i);
    const Json& t = (*tools)[i];
    if (!t.is_object()) bad(name, "expected an object");
    const std::string type = required_string(t, "type", name);
    if (type != "function") bad(name + ".type", "only function tools are supported, got " + quote_bytes(type));
    Json tool = Json{{"type", "function"}, {"name", required_string(t, "name", name)}};
    string_field(t, "description", name + ".description");
    boolean(t, "strict", name + ".strict");
    if (const Json* p = field(t, "parameters"); p && !p->is_object()) bad(name + ".parameters", "expected an object");
    for (const char* key : {"description", "parameters", "strict"})
      if (const Json* v = field(t, key)) tool[key] = *v;
    out.push_back(std::move(tool));
  }
  return out;
}

Json chat_tools(const Json& tools) {
  Json out = Json::array();
  for (const Json& t : tools) {
    Json fn = t;
    fn.erase("type");
    out.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice: auto | none | required, or {"type": "function", "name": N} (the chat form's named choice).
std::optional<Json> chat_tool_choice(const Json& j) {
  const Json* tc = field(j, "tool_choice");
  if (!tc || tc->is_string()) return tc ? std::optional<Json>(*tc) : std::nullopt;
  const std::string type = tc->is_object() ? string_field(*tc, "type", "tool_choice.type").value_or("") : "";
  if (type != "function") unsupported("tool_choice", "a tool choice other than auto, none, required or {\"type\":\"function\",\"name\":...}");
  return Json{{"type", "function"}, {"function", Json{{"name", required_string(*tc, "name", "tool_choice")}}}};
}

// text.format → the chat response_format (json_schema's members under "json_schema").
std::optional<Json> chat_response_format(const Json& j) {
  const Json* text = field(j, "text");
  if (!text) return std::nullopt;
  if (!text->is_object()) bad("text", "expected an object");
  string_field(*text, "verbosity", "text.verbosity");
  const Json* format = field(*text, "format");
  if (!format) return std::nullopt;
  if (!format->is_object()) bad("text.format", "expected an object");
  const std::string type = required_string(*format, "type", "text.format");
  if (type != "json_schema") return Json{{"type", type}};
  Json schema = *format;
  schema.erase("type");
  return Json{{"type", type}, {"json_schema", std::move(schema)}};
}

// Fields with no chat equivalent: checked, refused when they would change the result.
void check_responses_fields(const Json& j) {
  for (const char* key : {"instructions", "user", "previous_response_id", "service_tier", "prompt_cache_key", "safety_identifier"})
    string_field(j, key);
  boolean(j, "store");
  if (boolean(j, "background").value_or(false)) unsupported("background", "background");
  for (const char* key : {"conversation", "prompt", "context_management"})
    if (field(j, key)) unsupported(key, key);
  if (const std::optional<std::string> t = string_field(j, "truncation"); t && *t != "disabled")
    unsupported("truncation", "truncation " + quote_bytes(*t));
  if (const Json* inc = field(j, "include")) {
    if (!inc->is_array()) bad("include", "expected an array of strings");
    for (size_t i = 0; i < inc->size(); ++i) {
      if (!(*inc)[i].is_string()) bad(indexed("include", i), "expected a string");
      if ((*inc)[i] == "message.output_text.logprobs") unsupported(indexed("include", i), "message.output_text.logprobs");
    }
  }
  integer_in(j, "top_logprobs", 0, kMaxTopLogprobs);
  if (const Json* so = field(j, "stream_options"); so && !so->is_object()) bad("stream_options", "expected an object");
  if (const Json* md = field(j, "metadata")) {
    if (!md->is_object()) bad("metadata", "expected an object of strings");
    if (md->size() > 16) bad("metadata", "at most 16 pairs");
    for (const auto& [key, value] : md->items()) {
      if (key.size() > 64) bad("metadata", "keys are at most 64 characters");
      if (!value.is_string() || value.get_ref<const std::string&>().size() > 512)
        bad("metadata." + key, "expected a string of at most 512 characters");
    }
  }
  if (const Json* r = field(j, "reasoning")) {
    if (!r->is_object()) bad("reasoning", "expected an object");
    for (const char* key : {"effort", "summary", "generate_summary"}) string_field(*r, key, std::string("reasoning.") + key);
  }
}

// The chat path's fields that keep their meaning here (its extensions, and those it refuses).
constexpr const char* kPassThrough[] = {
    "model", "temperature", "top_p", "stream", "parallel_tool_calls", "seed", "top_k", "min_p", "presence_penalty",
    "frequency_penalty", "stop", "stop_token_ids", "ignore_eos", "skip_special_tokens", "chat_template_kwargs",
    "logit_bias", "repetition_penalty", "min_tokens", "use_beam_search", "include_stop_str_in_output"};

// The Response object's echo of the request.
Json echo_fields(const Json& j, const Json& tools) {
  auto or_null = [&](const char* key) { return field(j, key) ? j[key] : Json(nullptr); };
  const Json* r = field(j, "reasoning");
  const Json* text = field(j, "text");
  Json e = Json::object();
  e["instructions"] = or_null("instructions");
  e["max_output_tokens"] = or_null("max_output_tokens");
  e["metadata"] = field(j, "metadata") ? j["metadata"] : Json::object();
  e["parallel_tool_calls"] = boolean(j, "parallel_tool_calls").value_or(true);
  e["previous_response_id"] = or_null("previous_response_id");
  e["reasoning"] = Json{{"effort", r && field(*r, "effort") ? (*r)["effort"] : Json(nullptr)},
                        {"summary", r && field(*r, "summary") ? (*r)["summary"] : Json(nullptr)}};
  e["store"] = boolean(j, "store").value_or(true);
  e["temperature"] = field(j, "temperature") ? j["temperature"] : Json(1.0);
  e["text"] = Json{{"format", text && field(*text, "format") ? (*text)["format"] : Json{{"type", "text"}}}};
  e["tool_choice"] = field(j, "tool_choice") ? j["tool_choice"] : Json("auto");
  e["tools"] = tools;
  e["top_p"] = field(j, "top_p") ? j["top_p"] : Json(1.0);
  e["truncation"] = "disabled";
  if (field(j, "user")) e["user"] = j["user"];
  return e;
}

ApiError renamed(const ApiError& e, const std::string& param) {
  std::string message = e.what();
  if (!e.param().empty() && param != e.param())
    for (size_t at = message.find(e.param()); at != std::string::npos; at = message.find(e.param(), at + param.size()))
      message.replace(at, e.param().size(), param);
  return ApiError(e.status(), message, param, e.code());
}

// The Responses name of a chat field outside the messages.
std::string field_name(const std::string& param) {
  const std::pair<const char*, const char*> kRenames[] = {
      {"max_completion_tokens", "max_output_tokens"}, {"reasoning_effort", "reasoning.effort"},
      {"response_format.json_schema", "text.format"}, {"response_format", "text.format"}};
  for (const auto& [from, to] : kRenames)
    if (param.rfind(from, 0) == 0) return to + param.substr(std::string(from).size());
  if (param.rfind("tools[", 0) == 0) {
    if (const size_t f = param.find(".function"); f != std::string::npos) return param.substr(0, f) + param.substr(f + 9);
  }
  return param;
}

}  // namespace

ResponsesRequest parse_responses_request(std::string_view body, const ApiContext& ctx, ResponseStore& store) {
  const Json j = parse_request_body(body);
  check_responses_fields(j);
  ResponsesRequest r;
  r.store = boolean(j, "store").value_or(true);
  const Json tools = function_tools(j);
  r.echo = echo_fields(j, tools);

  MessageBuilder messages;
  if (const std::optional<std::string> instructions = string_field(j, "instructions")) {
    messages.add(Json{{"type", "message"}, {"role", "system"}, {"content", *instructions}}, "instructions");
  }
  r.conversation = Json::array();
  if (const std::optional<std::string> previous = string_field(j, "previous_response_id")) {
    std::optional<Json> items = store.items(*previous);
    if (!items) bad("previous_response_id", "Previous response with id " + quote_bytes(*previous) + " not found", "previous_response_not_found");
    for (const Json& stored : *items) {
      Json item = normalize_item(stored, "previous_response_id");
      messages.add(item, "previous_response_id");
      r.conversation.push_back(std::move(item));
    }
  }
  Json input = normalize_input(j);
  for (size_t i = 0; i < input.size(); ++i) {
    messages.add(input[i], indexed("input", i));
    r.conversation.push_back(std::move(input[i]));
  }

  Json chat_body = Json::object();
  for (const char* key : kPassThrough)
    if (j.contains(key)) chat_body[key] = j[key];
  for (const auto& [key, value] : j.items())
    if (key.rfind("guided_", 0) == 0) chat_body[key] = value;
  chat_body["messages"] = messages.messages();
  if (!tools.empty()) chat_body["tools"] = chat_tools(tools);
  if (std::optional<Json> tc = chat_tool_choice(j)) chat_body["tool_choice"] = std::move(*tc);
  if (j.contains("max_output_tokens")) chat_body["max_completion_tokens"] = j["max_output_tokens"];
  if (const Json* reasoning = field(j, "reasoning"); reasoning && field(*reasoning, "effort"))
    chat_body["reasoning_effort"] = (*reasoning)["effort"];
  if (std::optional<Json> format = chat_response_format(j)) chat_body["response_format"] = std::move(*format);
  try {
    r.chat = chat_request_from_json(chat_body, ctx);
  } catch (const ApiError& e) {
    throw renamed(e, field_name(messages.responses_name(e.param())));
  }
  return r;
}

}  // namespace k3::server
