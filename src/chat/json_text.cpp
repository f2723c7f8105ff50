#include "chat/json_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "io/json.h"

namespace k3::chat {

std::string escape_json_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::optional<Json> parse_model_json(std::string_view text) {
  try {
    return try_parse_json_value<Json>(text, Where{});
  } catch (const Error&) {  // too deep
    return std::nullopt;
  }
}

std::string json_string(std::string_view text) { return "\"" + escape_json_text(text) + "\""; }

namespace {

// Python float repr: shortest round-trip digits; exponent form when exp < -4 or exp >= 16.
std::string python_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  // buf = [-]D[.DDD]e±XX
  std::string s = buf;
  const size_t e = s.find('e');
  std::string mantissa = s.substr(0, e);
  const int exp = std::stoi(s.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += ebuf;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
  }
  return negative ? "-" + out : out;
}

void dump(const Json& v, JsonStyle style, std::string& out) {
  const char* item_sep = style == JsonStyle::kCompact ? "," : ", ";
  const char* key_sep = style == JsonStyle::kCompact ? ":" : ": ";
  switch (v.type()) {
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += item_sep;
        first = false;
        out += json_string(key);
        out += key_sep;
        dump(item, style, out);
      }
      out += '}';
      break;
    }
    case Json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += item_sep;
        dump(v[i], style, out);
      }
      out += ']';
      break;
    }
    case Json::value_t::string: out += json_string(v.get_ref<const std::string&>()); break;
    case Json::value_t::number_float: out += python_float(v.get<double>()); break;
    default: out += v.dump(); break;  // null, booleans, integers
  }
}

}  // namespace

std::string dump_json(const Json& value, JsonStyle style) {
  std::string out;
  dump(value, style, out);
  return out;
}

std::string dump_output(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json sorted_keys(const Json& value) {
  if (value.is_array()) {
    Json out = Json::array();
    for (const auto& item : value) out.push_back(sorted_keys(item));
    return out;
  }
  if (!value.is_object()) return value;
  // Members sorted by key (UTF-8 byte order = code point order), appended directly: keys are
  // unique already and ordered_json's own insertion searches linearly.
  const Json::object_t& members = value.get_ref<const Json::object_t&>();
  std::vector<const Json::object_t::value_type*> order;
  order.reserve(members.size());
  for (const auto& member : members) order.push_back(&member);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  Json out = Json::object();
  auto& storage = static_cast<Json::object_t::Container&>(out.get_ref<Json::object_t&>());
  storage.reserve(order.size());
  for (const auto* member : order) storage.emplace_back(member->first, sorted_keys(member->second));
  return out;
}

}  // namespace k3::chat
