// JSON text exactly as Python's json.dumps(ensure_ascii=False) writes it, which the chat formats
// were trained on: compact (separators "," ":") for declarations, default (", " ": ") for argument
// values. Strings escape only '"', '\\' and control characters; floats print as Python repr.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace k3::chat {

using Json = nlohmann::ordered_json;

enum class JsonStyle { kCompact, kPython };

std::string dump_json(const Json& value, JsonStyle style);
// nlohmann's compact text (no spaces) with invalid UTF-8 in strings replaced by U+FFFD: responses
// and the CLI's JSON lines.
std::string dump_output(const Json& value);
// A JSON string literal (with quotes) for raw text; escape_json_text is the same without quotes.
std::string json_string(std::string_view text);
std::string escape_json_text(std::string_view text);
// JSON text a model generated (tool-call arguments): nullopt when it is not JSON or nests deeper
// than io/json.h's kMaxJsonDepth, so the caller keeps it as text.
std::optional<Json> parse_model_json(std::string_view text);
// A copy with object keys sorted recursively (Python sort_keys; arrays keep their order).
Json sorted_keys(const Json& value);

}  // namespace k3::chat
