#include "server/api/request_fields.h"

#include "core/error.h"
#include "server/api_error.h"

namespace k3::server::request_fields {

void bad(const std::string& param, const std::string& message, const std::string& code) {
  std::string text;
  if (!param.empty()) {
    text += '\'';
    text += param;
    text += "': ";
  }
  text += message;
  throw ApiError(400, std::move(text), param, code);
}

void unsupported(const std::string& param, const std::string& what) { bad(param, what + " is not supported"); }

const Json* field(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number_in(const Json& j, const char* key, double lo, double hi, bool lo_open) {
  const Json* v = field(j, key);
  if (!v) return std::nullopt;
  std::string range = lo_open ? "(" : "[";
  range += short_number(lo);
  range += ", ";
  range += short_number(hi);
  range += "]";
  if (!v->is_number()) bad(key, "expected a number in " + range);
  const double d = v->get<double>();
  if (!(lo_open ? d > lo : d >= lo) || !(d <= hi)) bad(key, short_number(d) + " is out of range " + range);
  return d;
}

namespace {

std::string integer_range(int64_t lo, int64_t hi) {
  std::string range = "[";
  range += std::to_string(lo);
  range += ", ";
  range += std::to_string(hi);
  range += "]";
  return range;
}

}  // namespace

int64_t as_integer(const Json& v, const std::string& name, int64_t lo, int64_t hi) {
  const std::string range = integer_range(lo, hi);
  if (!v.is_number_integer()) bad(name, "expected an integer in " + range);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) bad(name, v.dump() + " is out of range " + range);
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) bad(name, std::to_string(i) + " is out of range " + range);
  return i;
}

std::optional<int64_t> integer_in(const Json& j, const char* key, int64_t lo, int64_t hi) {
  const Json* v = field(j, key);
  if (!v) return std::nullopt;
  return as_integer(*v, key, lo, hi);
}

std::optional<bool> boolean(const Json& j, const char* key, const std::string& name) {
  const Json* v = field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad(name.empty() ? key : name, "expected a boolean");
  return v->get<bool>();
}

std::optional<std::string> string_field(const Json& j, const char* key, const std::string& name) {
  const Json* v = field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(name.empty() ? key : name, "expected a string");
  return v->get<std::string>();
}

}  // namespace k3::server::request_fields
