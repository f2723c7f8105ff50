// A validator over the JSON Schema subset that json_schema_to_grammar supports; `pattern` and the
// formats through PCRE2.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cmath>

#include "core/error.h"
#include "grammar/json_schema.h"

namespace k3::grammar {
namespace {

// Search (not anchored unless the pattern is) with UTF semantics; nullopt when it does not compile.
std::optional<bool> regex_search(std::string_view pattern, std::string_view subject) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ALT_BSUX, &err, &offset, nullptr);
  if (!code) return std::nullopt;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), 0, 0, md, nullptr);
  pcre2_match_data_free(md);
  pcre2_code_free(code);
  return rc >= 0;
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

bool valid_date(const std::string& s) {
  if (!regex_search("^\\d{4}-\\d{2}-\\d{2}$", s).value_or(false)) return false;
  const int y = std::stoi(s.substr(0, 4)), m = std::stoi(s.substr(5, 2)), d = std::stoi(s.substr(8, 2));
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m < 1 || m > 12 || d < 1) return false;
  return d <= kDays[m - 1] + (m == 2 && leap(y) ? 1 : 0);
}

bool valid_time(const std::string& s) {
  if (!regex_search("^([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d+)?([zZ]|[+-]([01]\\d|2[0-3]):[0-5]\\d)$", s).value_or(false))
    return false;
  return true;
}

bool valid_format(const std::string& format, const std::string& s) {
  if (format == "date") return valid_date(s);
  if (format == "time") return valid_time(s);
  if (format == "date-time") {
    const size_t t = s.find_first_of("Tt");
    return t != std::string::npos && valid_date(s.substr(0, t)) && valid_time(s.substr(t + 1));
  }
  if (format == "uuid") return regex_search("^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$", s).value_or(false);
  if (format == "email")
    return regex_search("^[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*@([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\\.)+[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$", s)
        .value_or(false);
  if (format == "ipv4")
    return regex_search("^((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$", s).value_or(false);
  return true;
}

std::string type_of(const OrderedJson& v) {
  switch (v.type()) {
    case OrderedJson::value_t::object: return "object";
    case OrderedJson::value_t::array: return "array";
    case OrderedJson::value_t::string: return "string";
    case OrderedJson::value_t::boolean: return "boolean";
    case OrderedJson::value_t::null: return "null";
    default: return "number";
  }
}

bool has_type(const OrderedJson& v, const std::string& t) {
  if (t == "integer") return v.is_number() && std::floor(v.get<double>()) == v.get<double>();
  return type_of(v) == t;
}

class Validator {
 public:
  explicit Validator(const OrderedJson& root) : root_(root) {}

  std::string check(const OrderedJson& v, const OrderedJson& s, const std::string& path, int depth = 0) {
    if (depth > 512) return path + ": schema nesting too deep";
    if (s.is_boolean()) return s.get<bool>() ? "" : path + ": no value is allowed";
    if (!s.is_object()) return "";
    if (s.contains("$ref")) {
      const OrderedJson* target = resolve(s["$ref"].get<std::string>());
      if (!target) return path + ": unresolved reference";
      return check(v, *target, path, depth + 1);
    }
    if (s.contains("allOf"))
      for (const auto& sub : s["allOf"])
        if (auto e = check(v, sub, path, depth + 1); !e.empty()) return e;
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      int matches = 0;
      for (const auto& sub : s[key]) matches += check(v, sub, path, depth + 1).empty();
      if (matches == 0) return path + ": matches none of " + key;
      if (std::string_view(key) == "oneOf" && matches > 1) return path + ": matches more than one of oneOf";
    }
    if (s.contains("const") && !(v == s["const"])) return path + ": is not the const value";
    if (s.contains("enum")) {
      bool found = false;
      for (const auto& e : s["enum"]) found |= v == e;
      if (!found) return path + ": is not one of the enum values";
    }
    if (s.contains("type")) {
      std::vector<std::string> types;
      if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
      else for (const auto& t : s["type"]) types.push_back(t.get<std::string>());
      if (s.value("nullable", false)) types.push_back("null");
      bool ok = false;
      for (const std::string& t : types) ok |= has_type(v, t);
      if (!ok) return path + ": " + type_of(v) + " is not of the allowed type";
    }
    if (v.is_object()) return check_object(v, s, path, depth);
    if (v.is_array()) return check_array(v, s, path, depth);
    if (v.is_string()) return check_string(v.get<std::string>(), s, path);
    if (v.is_number()) return check_number(v.get<double>(), s, path);
    return "";
  }

 private:
  const OrderedJson* resolve(const std::string& ref) {
    if (ref.rfind('#', 0) != 0) return nullptr;
    const OrderedJson* node = &root_;
    std::string pointer = ref.substr(1);
    size_t at = 0;
    while (at < pointer.size()) {
      const size_t next = pointer.find('/', at + 1);
      std::string key = pointer.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
      std::string k;
      for (size_t i = 0; i < key.size(); ++i) {
        if (key[i] == '~' && i + 1 < key.size()) k += key[++i] == '0' ? '~' : '/';
        else k += key[i];
      }
      if (node->is_object() && node->contains(k)) node = &(*node)[k];
      else if (node->is_array() && !k.empty() && k.find_first_not_of("0123456789") == std::string::npos && std::stoull(k) < node->size())
        node = &(*node)[std::stoull(k)];
      else return nullptr;
      at = next == std::string::npos ? pointer.size() : next;
    }
    return node;
  }

  std::string check_object(const OrderedJson& v, const OrderedJson& s, const std::string& path, int depth) {
    if (s.contains("required"))
      for (const auto& name : s["required"])
        if (!v.contains(name.get<std::string>())) return path + ": missing required property '" + name.get<std::string>() + "'";
    const OrderedJson* props = s.contains("properties") ? &s["properties"] : nullptr;
    for (const auto& [key, sub] : v.items()) {
      const std::string p = path + "/" + key;
      if (props && props->contains(key)) {
        if (auto e = check(sub, (*props)[key], p, depth + 1); !e.empty()) return e;
      } else if (s.contains("additionalProperties")) {
        if (auto e = check(sub, s["additionalProperties"], p, depth + 1); !e.empty()) return e;
      }
    }
    return "";
  }

  std::string check_array(const OrderedJson& v, const OrderedJson& s, const std::string& path, int depth) {
    const size_t prefix = s.contains("prefixItems") ? s["prefixItems"].size() : 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string p = path + "/" + std::to_string(i);
      const OrderedJson* sub = i < prefix ? &s["prefixItems"][i] : s.contains("items") ? &s["items"] : nullptr;
      if (sub)
        if (auto e = check(v[i], *sub, p, depth + 1); !e.empty()) return e;
    }
    if (s.contains("minItems") && v.size() < s["minItems"].get<uint64_t>()) return path + ": fewer items than minItems";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<uint64_t>()) return path + ": more items than maxItems";
    if (s.value("uniqueItems", false))
      for (size_t i = 0; i < v.size(); ++i)
        for (size_t j = i + 1; j < v.size(); ++j)
          if (v[i] == v[j]) return path + ": items are not unique";
    return "";
  }

  std::string check_string(const std::string& str, const OrderedJson& s, const std::string& path) {
    const size_t n = code_points(str);
    if (s.contains("minLength") && n < s["minLength"].get<uint64_t>()) return path + ": shorter than minLength";
    if (s.contains("maxLength") && n > s["maxLength"].get<uint64_t>()) return path + ": longer than maxLength";
    if (s.contains("pattern")) {
      const auto m = regex_search(s["pattern"].get<std::string>(), str);
      if (!m) return path + ": pattern does not compile";
      if (!*m) return path + ": does not match the pattern";
    }
    if (s.contains("format") && !valid_format(s["format"].get<std::string>(), str))
      return path + ": not a valid " + s["format"].get<std::string>();
    return "";
  }

  std::string check_number(double x, const OrderedJson& s, const std::string& path) {
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return path + ": below the minimum";
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return path + ": above the maximum";
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return path + ": not above exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return path + ": not below exclusiveMaximum";
    return "";
  }

  const OrderedJson& root_;
};

}  // namespace

std::string json_schema_violation_at(const OrderedJson& value, const OrderedJson& schema, const OrderedJson& root) {
  try {
    return Validator(root).check(value, schema, "");
  } catch (const nlohmann::json::exception& e) {
    return std::string("malformed schema keyword: ") + e.what();
  } catch (const std::exception& e) {  // std::stoull / std::stoi on odd input
    return std::string("malformed schema: ") + e.what();
  }
}

std::string json_schema_violation(const OrderedJson& value, const OrderedJson& schema) {
  return json_schema_violation_at(value, schema, schema);
}

}  // namespace k3::grammar
