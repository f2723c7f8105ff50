#include "chat/reply_grammar.h"

#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/json_schema.h"

namespace k3::chat {
namespace {

namespace g = grammar;

// Copies `sub`'s rules into `into` under `prefix` (references rewritten); returns a reference to
// its root.
void prefix_refs(g::Expr& e, const std::string& prefix) {
  if (e.kind == g::Expr::Kind::kRef) e.text = prefix + e.text;
  for (g::Expr& item : e.items) prefix_refs(item, prefix);
}

g::Expr embed(g::Grammar& into, const g::Grammar& sub, const std::string& prefix) {
  for (const g::Rule& r : sub.rules) {
    g::Expr body = r.body;
    prefix_refs(body, prefix);
    into.add(prefix + r.name, std::move(body));
  }
  return g::rule_ref(prefix + sub.root);
}

// A JSON Schema's grammar, its errors renamed to `field`.
g::Grammar schema_grammar(const Json& schema, const std::string& field) {
  try {
    return g::json_schema_to_grammar(schema);  // chat::Json is the ordered JSON the translator takes
  } catch (const Error& e) {
    throw Error(Where{"", "", field}, e.detail());
  }
}

// Attribute values as the renderer writes them (spec §5.1): & then " escaped.
std::string escape_attribute(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

g::Expr free_text() { return g::star(g::any_char()); }
g::Expr digits() { return g::plus(g::cls({{'0', '9'}})); }

// The content grammar of the request: the caller's, else from response_format (nullopt: free).
std::optional<g::Grammar> content_of(const Request& request, const std::optional<g::Grammar>& given) {
  if (given) return given;
  const Json& rf = request.response_format;
  if (!rf.is_object()) return std::nullopt;
  const std::string type = rf.value("type", "");
  if (type == "json_object") return g::json_object_grammar();
  if (type != "json_schema") return std::nullopt;
  // The schema sits at json_schema.schema, else json_schema.json_schema, else json_schema itself (§5.3).
  const Json& js = rf.contains("json_schema") ? rf["json_schema"] : Json();
  if (!js.is_object()) throw Error(Where{"", "", "response_format.json_schema"}, "expected an object");
  if (js.contains("schema")) return schema_grammar(js["schema"], "response_format.json_schema.schema");
  if (js.contains("json_schema")) return schema_grammar(js["json_schema"], "response_format.json_schema.json_schema");
  if (js.empty()) throw Error(Where{"", "", "response_format.json_schema.schema"}, "missing: the schema the reply follows");
  return schema_grammar(js, "response_format.json_schema");
}

struct Tool {
  std::string name;
  Json parameters;  // an object schema (an empty object when the tool declares none)
  std::string field;
};

std::vector<Tool> tools_of(const Request& request) {
  std::vector<Tool> out;
  for (size_t i = 0; i < request.tools.size(); ++i) {
    const Json& t = request.tools[i];
    const std::string field = "tools[" + std::to_string(i) + "].function";
    const Json* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (!fn || !fn->is_object() || !(*fn).contains("name") || !(*fn)["name"].is_string()) {
      throw Error(Where{"", "", field + ".name"}, "expected a function with a name");
    }
    out.push_back({(*fn)["name"].get<std::string>(), fn->value("parameters", Json::object()), field + ".parameters"});
  }
  return out;
}

// The XTML argument type of a property schema (spec §5.4), when it has one plain JSON type and,
// for strings, no pattern, format or length bounds (raw strings cannot carry them). "" otherwise.
std::string schema_argument_type(const Json& p) {
  if (!p.is_object()) return "";
  if (p.contains("enum") || p.contains("const")) {
    const Json values = p.contains("enum") ? p["enum"] : Json::array({p["const"]});
    if (!values.is_array() || values.empty()) return "";
    for (const Json& v : values) {
      if (!v.is_string()) return "";
    }
    return "string";
  }
  if (!p.contains("type") || !p["type"].is_string()) return "";
  const std::string type = p["type"].get<std::string>();
  if (type == "string") {
    for (const char* k : {"pattern", "format", "minLength", "maxLength"}) {
      if (p.contains(k)) return "";
    }
    return "string";
  }
  if (type == "integer" || type == "number") return "number";
  if (type == "boolean" || type == "null" || type == "object" || type == "array") return type;
  return "";
}

class K3Builder {
 public:
  explicit K3Builder(g::Grammar& out) : g_(out) {}

  g::Expr open_tag(const std::string& header) { return g::seq({g::special("<|open|>"), g::lit(header), g::special("<|sep|>")}); }
  g::Expr close_tag(const std::string& tag) { return g::seq({g::special("<|close|>"), g::lit(tag), g::special("<|sep|>")}); }

  // One call of `tool`: its header, then its arguments.
  g::Expr call(const Tool& tool, size_t t) {
    const std::string prefix = "t" + std::to_string(t) + "-";
    const Json& params = tool.parameters;
    std::vector<g::Expr> parts = {g::special("<|open|>"), g::lit("call tool=\"" + escape_attribute(tool.name) + "\" index=\""),
                                  digits(), g::lit("\""), g::special("<|sep|>")};
    const Json props = params.is_object() && params.contains("properties") ? params["properties"] : Json::object();
    bool argument_form = props.is_object();
    if (argument_form) {
      for (const auto& [key, p] : props.items()) argument_form = argument_form && !schema_argument_type(p).empty();
    }
    if (argument_form) {
      const Json required = params.value("required", Json::array());
      size_t k = 0;
      for (const auto& [key, p] : props.items()) {
        const std::string type = schema_argument_type(p);
        g::Expr value = type == "string" ? raw_string(p) : embed(g_, schema_grammar(p, tool.field + ".properties." + key), prefix + std::to_string(k) + "-");
        g::Expr arg = g::seq({open_tag("argument key=\"" + escape_attribute(key) + "\" type=\"" + type + "\""), std::move(value), close_tag("argument")});
        bool is_required = false;
        for (const Json& r : required) is_required = is_required || r == key;
        parts.push_back(is_required ? std::move(arg) : g::opt(std::move(arg)));
        ++k;
      }
    } else {
      parts.push_back(open_tag("json type=\"object\""));
      parts.push_back(embed(g_, schema_grammar(params, tool.field), prefix));
      parts.push_back(close_tag("json"));
    }
    parts.push_back(close_tag("call"));
    return g::seq(std::move(parts));
  }

  // A string value as the argument form writes it: the characters themselves, no quotes or escapes.
  static g::Expr raw_string(const Json& p) {
    if (!p.contains("enum") && !p.contains("const")) return free_text();
    std::vector<g::Expr> choices;
    for (const Json& v : p.contains("enum") ? p["enum"] : Json::array({p["const"]})) choices.push_back(g::lit(v.get<std::string>()));
    return g::alt(std::move(choices));
  }

 private:
  g::Grammar& g_;
};

std::optional<g::Grammar> k3_reply(const Request& request, const std::optional<g::Grammar>& content, bool tools_required) {
  g::Grammar out;
  K3Builder b(out);
  const std::vector<Tool> tools = tools_of(request);
  const bool tools_allowed = tools_required || (!tools.empty() && request.tool_choice == "auto");
  std::vector<g::Expr> root;
  if (request.thinking) {
    root.push_back(free_text());
    root.push_back(b.close_tag("think"));
    root.push_back(b.open_tag("response"));
  }
  // A required call comes at once: no response text unless the content is constrained.
  if (content) root.push_back(embed(out, *content, "c-"));
  else if (!tools_required) root.push_back(free_text());
  root.push_back(b.close_tag("response"));
  if (tools_allowed) {
    std::vector<g::Expr> calls;
    for (size_t t = 0; t < tools.size(); ++t) calls.push_back(b.call(tools[t], t));
    out.add("call", g::alt(std::move(calls)));
    g::Expr calls_part = request.parallel_tool_calls ? g::plus(g::rule_ref("call")) : g::rule_ref("call");
    g::Expr section = g::seq({b.open_tag("tools"), std::move(calls_part), b.close_tag("tools")});
    root.push_back(tools_required ? std::move(section) : g::opt(std::move(section)));
  }
  root.push_back(b.close_tag("message"));
  out.add("root", g::seq(std::move(root)));
  return out;
}

std::optional<g::Grammar> kimi_linear_reply(const Request& request, const std::optional<g::Grammar>& content, bool tools_required) {
  g::Grammar out;
  const std::vector<Tool> tools = tools_of(request);
  std::vector<g::Expr> root;
  if (content) root.push_back(embed(out, *content, "c-"));
  else if (!tools_required) root.push_back(free_text());
  if (tools_required || (!tools.empty() && request.tool_choice == "auto")) {
    std::vector<g::Expr> calls;
    for (size_t t = 0; t < tools.size(); ++t) {
      calls.push_back(g::seq({g::special("<|tool_call_begin|>"), g::lit("functions." + tools[t].name + ":"), digits(),
                              g::special("<|tool_call_argument_begin|>"),
                              embed(out, schema_grammar(tools[t].parameters, tools[t].field), "t" + std::to_string(t) + "-"),
                              g::special("<|tool_call_end|>")}));
    }
    out.add("call", g::alt(std::move(calls)));
    g::Expr calls_part = request.parallel_tool_calls ? g::plus(g::rule_ref("call")) : g::rule_ref("call");
    g::Expr section = g::seq({g::special("<|tool_calls_section_begin|>"), std::move(calls_part), g::special("<|tool_calls_section_end|>")});
    root.push_back(tools_required ? std::move(section) : g::opt(std::move(section)));
  }
  out.add("root", g::seq(std::move(root)));
  return out;
}

}  // namespace

std::optional<g::Grammar> reply_grammar(const Request& request, ReplyFormat format, const std::optional<g::Grammar>& content) {
  const bool tools_required = request.tool_choice == "required";
  if (tools_required && request.tools.empty()) throw Error(Where{"", "", "tool_choice"}, "required, but no tools are declared");
  const std::optional<g::Grammar> body = content_of(request, content);
  if (!body && !tools_required) return std::nullopt;
  return format == ReplyFormat::kKimiK3 ? k3_reply(request, body, tools_required) : kimi_linear_reply(request, body, tools_required);
}

}  // namespace k3::chat
