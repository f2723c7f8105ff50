// Reading the fields of an API request body: every client error is a 400 ApiError naming the field
// in `param` and in the message ("'temperature': 3 is out of range [0, 2]"). Shared by the
// endpoints' parsers (openai_request.cpp, responses_request.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "chat/json_text.h"

namespace k3::server::request_fields {

using chat::Json;

[[noreturn]] void bad(const std::string& param, const std::string& message, const std::string& code = "");
// "'param': what is not supported".
[[noreturn]] void unsupported(const std::string& param, const std::string& what);

// The value of `key`, nullptr when absent or null.
const Json* field(const Json& j, const char* key);

// The value of `key` checked (absent or null: nullopt); `name` is the field's name in errors
// (default: the key).
std::optional<double> number_in(const Json& j, const char* key, double lo, double hi, bool lo_open = false);
int64_t as_integer(const Json& v, const std::string& name, int64_t lo, int64_t hi);
std::optional<int64_t> integer_in(const Json& j, const char* key, int64_t lo, int64_t hi);
std::optional<bool> boolean(const Json& j, const char* key, const std::string& name = "");
std::optional<std::string> string_field(const Json& j, const char* key, const std::string& name = "");

}  // namespace k3::server::request_fields
