#include "schema_sampler.h"

#include <cmath>

#include "grammar/regex.h"
#include "tokenizer/utf8.h"

namespace k3::grammar::test {
namespace {

int uniform(std::mt19937& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

const OrderedJson& resolve(const OrderedJson& root, const std::string& ref) {
  const OrderedJson* node = &root;
  std::string p = ref.substr(1);
  for (size_t at = 0; at < p.size();) {
    const size_t next = p.find('/', at + 1);
    node = &(*node)[p.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1)];
    at = next == std::string::npos ? p.size() : next;
  }
  return *node;
}

std::string random_text(std::mt19937& rng, int n) {
  static const char* pieces[] = {"a", "b", "Z", " ", "0", "-", "\"", "\\", "\n", "\t", "é", "中", "😀", "/", "x", "\x01", "{", "}"};
  std::string s;
  for (int i = 0; i < n; ++i) s += pieces[uniform(rng, 0, sizeof(pieces) / sizeof(*pieces) - 1)];
  return s;
}

std::string digits(std::mt19937& rng, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>('0' + uniform(rng, 0, 9));
  return s;
}

void derive(const Expr& e, std::mt19937& rng, std::string& out) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: out += e.text; return;
    case Expr::Kind::kClass: {
      const CodeRange& r = e.ranges[uniform(rng, 0, static_cast<int>(e.ranges.size()) - 1)];
      const char32_t span = std::min<char32_t>(r.hi - r.lo, 200);
      utf8::append(out, r.lo + static_cast<char32_t>(uniform(rng, 0, static_cast<int>(span))));
      return;
    }
    case Expr::Kind::kSeq:
      for (const Expr& item : e.items) derive(item, rng, out);
      return;
    case Expr::Kind::kAlt: derive(e.items[uniform(rng, 0, static_cast<int>(e.items.size()) - 1)], rng, out); return;
    case Expr::Kind::kRepeat: {
      const uint32_t hi = e.max == Expr::kUnbounded ? e.min + 3 : std::min(e.max, e.min + 3);
      const int n = uniform(rng, static_cast<int>(e.min), static_cast<int>(hi));
      for (int i = 0; i < n; ++i) derive(e.items[0], rng, out);
      return;
    }
    default: return;
  }
}

std::string two(int v) { return (v < 10 ? "0" : "") + std::to_string(v); }

std::string sample_format(const std::string& f, std::mt19937& rng) {
  const std::string date = std::to_string(uniform(rng, 1900, 2099)) + "-" + two(uniform(rng, 1, 12)) + "-" + two(uniform(rng, 1, 28));
  const std::string time = two(uniform(rng, 0, 23)) + ":" + two(uniform(rng, 0, 59)) + ":" + two(uniform(rng, 0, 59)) +
                           (uniform(rng, 0, 1) ? "." + digits(rng, uniform(rng, 1, 6)) : "") +
                           (uniform(rng, 0, 1) ? "Z" : std::string(uniform(rng, 0, 1) ? "+" : "-") + two(uniform(rng, 0, 23)) + ":" + two(uniform(rng, 0, 59)));
  if (f == "date") return date;
  if (f == "time") return time;
  if (f == "date-time") return date + "T" + time;
  if (f == "uuid") {
    std::string s;
    for (int n : {8, 4, 4, 4, 12}) {
      if (!s.empty()) s += '-';
      for (int i = 0; i < n; ++i) s += "0123456789abcdef"[uniform(rng, 0, 15)];
    }
    return s;
  }
  if (f == "email") return "user" + digits(rng, 2) + "." + "x@mail-" + digits(rng, 1) + ".example.com";
  if (f == "ipv4") return std::to_string(uniform(rng, 0, 255)) + "." + std::to_string(uniform(rng, 0, 255)) + ".0." + std::to_string(uniform(rng, 1, 254));
  return "x";
}

OrderedJson any_value(std::mt19937& rng, int depth) {
  switch (uniform(rng, 0, depth > 2 ? 4 : 6)) {
    case 0: return nullptr;
    case 1: return uniform(rng, 0, 1) == 1;
    case 2: return uniform(rng, -1000, 1000);
    case 3: return uniform(rng, -1000, 1000) / 8.0;
    case 4: return random_text(rng, uniform(rng, 0, 6));
    case 5: {
      OrderedJson a = OrderedJson::array();
      for (int i = uniform(rng, 0, 3); i > 0; --i) a.push_back(any_value(rng, depth + 1));
      return a;
    }
    default: {
      OrderedJson o = OrderedJson::object();
      for (int i = uniform(rng, 0, 3); i > 0; --i) o["k" + std::to_string(uniform(rng, 0, 99))] = any_value(rng, depth + 1);
      return o;
    }
  }
}

}  // namespace

std::string sample_regex(std::string_view pattern, std::mt19937& rng) {
  std::string out;
  derive(parse_regex(pattern).expr, rng, out);
  return out;
}

OrderedJson sample_value(const OrderedJson& s, const OrderedJson& root, std::mt19937& rng, int depth) {
  if (s.is_boolean() || (s.is_object() && s.empty())) return any_value(rng, depth);
  if (s.contains("$ref")) return sample_value(resolve(root, s["$ref"].get<std::string>()), root, rng, depth + 1);
  if (s.contains("allOf")) return sample_value(s["allOf"][0], root, rng, depth);
  for (const char* key : {"anyOf", "oneOf"})
    if (s.contains(key)) return sample_value(s[key][uniform(rng, 0, static_cast<int>(s[key].size()) - 1)], root, rng, depth);
  if (s.contains("const")) return s["const"];
  if (s.contains("enum")) return s["enum"][uniform(rng, 0, static_cast<int>(s["enum"].size()) - 1)];
  std::vector<std::string> types;
  if (s.contains("type")) {
    if (s["type"].is_string()) types.push_back(s["type"]);
    else for (const auto& t : s["type"]) types.push_back(t);
  } else if (s.contains("properties") || s.contains("additionalProperties")) {
    types.push_back("object");
  } else {
    return any_value(rng, depth);
  }
  if (s.value("nullable", false)) types.push_back("null");
  const std::string t = types[uniform(rng, 0, static_cast<int>(types.size()) - 1)];
  if (t == "null") return nullptr;
  if (t == "boolean") return uniform(rng, 0, 1) == 1;
  if (t == "integer" || t == "number") {
    double lo = s.contains("minimum") ? s["minimum"].get<double>() : -1e6;
    double hi = s.contains("maximum") ? s["maximum"].get<double>() : 1e6;
    if (s.contains("exclusiveMinimum")) lo = std::floor(s["exclusiveMinimum"].get<double>()) + 1;
    if (s.contains("exclusiveMaximum")) hi = std::ceil(s["exclusiveMaximum"].get<double>()) - 1;
    lo = std::ceil(lo);
    hi = std::floor(hi);
    const int64_t a = static_cast<int64_t>(std::max(lo, hi - 2000)), b = static_cast<int64_t>(hi);
    const int64_t i = std::uniform_int_distribution<int64_t>(a, b)(rng);
    if (t == "integer" || i == b || uniform(rng, 0, 2) == 0) return i;
    return static_cast<double>(i) + uniform(rng, 1, 99) / 100.0;  // stays in [i, b)
  }
  if (t == "string") {
    if (s.contains("format")) return sample_format(s["format"], rng);
    if (s.contains("pattern")) return sample_regex(s["pattern"].get<std::string>(), rng);
    const int lo = s.value("minLength", 0), hi = std::min(s.value("maxLength", lo + 12), lo + 12);
    std::string out;
    const int n = uniform(rng, lo, hi);
    for (int i = 0; i < n; ++i) out += random_text(rng, 1);
    return out;
  }
  if (t == "array") {
    OrderedJson a = OrderedJson::array();
    const size_t prefix = s.contains("prefixItems") ? s["prefixItems"].size() : 0;
    const bool more = !(s.contains("items") && s["items"].is_boolean() && !s["items"].get<bool>());
    const int lo = s.value("minItems", 0);
    int hi = std::min(s.value("maxItems", lo + 3), lo + 3);
    if (!more) hi = std::min<int>(hi, static_cast<int>(prefix));
    if (depth > 4) hi = lo;
    const int n = uniform(rng, lo, std::max(lo, hi));
    for (int i = 0; i < n; ++i) {
      const OrderedJson& sub = static_cast<size_t>(i) < prefix ? s["prefixItems"][i] : s.contains("items") ? s["items"] : OrderedJson(true);
      a.push_back(sample_value(sub, root, rng, depth + 1));
    }
    return a;
  }
  OrderedJson o = OrderedJson::object();
  std::vector<std::string> required;
  if (s.contains("required")) required = s["required"].get<std::vector<std::string>>();
  if (s.contains("properties"))
    for (const auto& [key, sub] : s["properties"].items()) {
      const bool req = std::find(required.begin(), required.end(), key) != required.end();
      if (req || (depth < 4 && uniform(rng, 0, 1))) o[key] = sample_value(sub, root, rng, depth + 1);
    }
  if (s.contains("additionalProperties") && !(s["additionalProperties"].is_boolean() && !s["additionalProperties"].get<bool>()))
    for (int i = uniform(rng, 0, 2); i > 0; --i) {
      const std::string key = "extra_" + std::to_string(uniform(rng, 0, 999)) + (uniform(rng, 0, 1) ? "é" : "");
      if (!o.contains(key) && !(s.contains("properties") && s["properties"].contains(key)))
        o[key] = sample_value(s["additionalProperties"], root, rng, depth + 1);
    }
  return o;
}

}  // namespace k3::grammar::test
