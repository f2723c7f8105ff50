// JSON Schema → Grammar IR. One rule per object member used twice, per array item and per $ref
// target; everything else is built inline and left to the lowering (flat_lower.cpp) to expand.
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "core/error.h"
#include "grammar/json_schema_detail.h"
#include "io/json.h"
#include "tokenizer/utf8.h"

namespace k3::grammar {

std::string json_schema_violation_at(const OrderedJson& value, const OrderedJson& schema, const OrderedJson& root);

namespace {

using namespace schema_detail;

constexpr uint64_t kMaxCount = 10000;  // minItems / maxItems / minLength / maxLength

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default", "examples", "example", "$comment", "deprecated", "readOnly", "writeOnly",
    "$schema", "$id", "$anchor", "contentEncoding", "contentMediaType", "$defs", "definitions"};
const std::set<std::string, std::less<>> kSupported = {
    "type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "nullable", "properties", "required",
    "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength",
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const std::set<std::string, std::less<>> kObjectKeys = {"properties", "required", "additionalProperties"};
const std::set<std::string, std::less<>> kArrayKeys = {"items", "prefixItems", "minItems", "maxItems"};
const std::set<std::string, std::less<>> kStringKeys = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string, std::less<>> kNumberKeys = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

bool is_annotation(std::string_view key) { return kAnnotations.count(key) || key.rfind("x-", 0) == 0; }

std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string dump(const OrderedJson& v) { return v.dump(-1, ' ', false, OrderedJson::error_handler_t::strict); }

class Translator {
 public:
  Translator(const OrderedJson& root, const JsonSchemaOptions& options) : root_(root), options_(options) {}

  Grammar run() {
    Expr body = value(root_, "");
    g_.add("root", std::move(body));
    return std::move(g_);
  }

  // The generic grammars: root ::= json-object / json-value.
  Grammar generic(bool object_only) {
    g_.add("root", object_only ? generic_object() : generic_value());
    return std::move(g_);
  }

 private:
  [[noreturn]] static void fail(const std::string& ptr, const std::string& message) {
    throw Error("json schema #" + ptr + ": " + message);
  }

  std::string fresh(std::string_view stem) { return std::string(stem) + "-" + std::to_string(++counter_); }

  Expr named(std::string_view stem, Expr body, bool shared = false) {
    std::string name = fresh(stem);
    g_.add(name, std::move(body), shared);
    return rule_ref(name);
  }

  Expr ws() {
    if (options_.whitespace == JsonWhitespace::kCompact) return empty();
    if (!g_.find("ws"))
      g_.add("ws", opt(alt({lit(" "), seq({lit("\n"), repeat(cls({{' ', ' '}, {'\t', '\t'}}), 0, 20)})})));
    return rule_ref("ws");
  }

  // ---- generic JSON ----------------------------------------------------------------------
  void define_generic() {
    if (g_.find("json-value")) return;
    g_.add("json-value", empty());  // placeholder, replaced below (the rules refer to each other)
    g_.add("json-string", json_string(0, Expr::kUnbounded));
    g_.add("json-number", json_number(std::nullopt, std::nullopt));
    const Expr member = seq({rule_ref("json-string"), ws(), lit(":"), ws(), rule_ref("json-value"), ws()});
    g_.add("json-object", seq({lit("{"), ws(), opt(seq({member, star(seq({lit(","), ws(), member}))})), lit("}")}));
    const Expr element = seq({rule_ref("json-value"), ws()});
    g_.add("json-array", seq({lit("["), ws(), opt(seq({element, star(seq({lit(","), ws(), element}))})), lit("]")}));
    for (Rule& r : g_.rules)
      if (r.name == "json-value")
        r.body = alt({rule_ref("json-object"), rule_ref("json-array"), rule_ref("json-string"), rule_ref("json-number"), lit("true"),
                      lit("false"), lit("null")});
  }
  Expr generic_value() {
    define_generic();
    return rule_ref("json-value");
  }
  Expr generic_object() {
    define_generic();
    return rule_ref("json-object");
  }

  // ---- dispatch --------------------------------------------------------------------------
  Expr value(const OrderedJson& s, const std::string& ptr) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(ptr, "the schema false allows no value");
      return generic_value();
    }
    if (!s.is_object()) fail(ptr, "a schema must be an object or a boolean");
    std::vector<std::string> checks;  // keywords that constrain
    for (const auto& [key, v] : s.items()) {
      if (is_annotation(key)) continue;
      if (!kSupported.count(key)) fail(ptr, "unsupported keyword '" + key + "'");
      checks.push_back(key);
    }
    auto alone = [&](const char* key) {
      if (checks.size() > 1) fail(ptr, std::string("'") + key + "' together with other constraining keywords is not supported");
    };
    if (s.contains("$ref")) {
      alone("$ref");
      return reference(s["$ref"], ptr + "/$ref");
    }
    if (s.contains("allOf")) {
      alone("allOf");
      const OrderedJson& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) fail(ptr + "/allOf", "only allOf with exactly one schema is supported");
      return value(all[0], ptr + "/allOf/0");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      alone(key);
      const OrderedJson& list = s[key];
      if (!list.is_array() || list.empty()) fail(ptr + "/" + key, "expected a non-empty array of schemas");
      std::vector<Expr> alts;
      for (size_t i = 0; i < list.size(); ++i) alts.push_back(value(list[i], ptr + "/" + key + "/" + std::to_string(i)));
      return alt(std::move(alts));
    }
    if (s.contains("uniqueItems") && !(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>()))
      fail(ptr + "/uniqueItems", "uniqueItems: true is not supported");
    if (s.contains("enum") || s.contains("const")) return enumeration(s, ptr);
    std::vector<std::string> types = type_list(s, ptr);
    std::vector<Expr> alts;
    const bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
    for (const std::string& t : types) {
      if (t == "object") alts.push_back(object(s, ptr));
      else if (t == "array") alts.push_back(array(s, ptr));
      else if (t == "string") alts.push_back(string(s, ptr));
      else if (t == "number") alts.push_back(number(s, ptr, false));
      else if (t == "integer" && !has_number) alts.push_back(number(s, ptr, true));
      else if (t == "boolean") alts.push_back(alt({lit("true"), lit("false")}));
      else if (t == "null") alts.push_back(lit("null"));
    }
    if (alts.empty()) return generic_value();
    return alt(std::move(alts));
  }

  std::vector<std::string> type_list(const OrderedJson& s, const std::string& ptr) {
    static const std::set<std::string, std::less<>> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};
    std::vector<std::string> types;
    if (s.contains("type")) {
      const OrderedJson& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& item : t) {
          if (!item.is_string()) fail(ptr + "/type", "expected a type name or an array of them");
          types.push_back(item.get<std::string>());
        }
      } else {
        fail(ptr + "/type", "expected a type name or an array of them");
      }
      for (const std::string& name : types)
        if (!kTypes.count(name)) fail(ptr + "/type", "unknown type '" + name + "'");
    } else {
      // No type: the types the keywords are about (generating only those keeps every value valid).
      auto any_of = [&](const std::set<std::string, std::less<>>& keys) {
        for (const auto& [key, v] : s.items())
          if (keys.count(key)) return true;
        return false;
      };
      if (any_of(kObjectKeys)) types.push_back("object");
      if (any_of(kArrayKeys)) types.push_back("array");
      if (any_of(kStringKeys)) types.push_back("string");
      if (any_of(kNumberKeys)) types.push_back("number");
      if (types.empty() && s.contains("nullable")) return {};
    }
    if (s.contains("nullable")) {
      if (!s["nullable"].is_boolean()) fail(ptr + "/nullable", "expected a boolean");
      if (s["nullable"].get<bool>() && !types.empty() && std::find(types.begin(), types.end(), "null") == types.end())
        types.push_back("null");
    }
    return types;
  }

  // ---- $ref ------------------------------------------------------------------------------
  Expr reference(const OrderedJson& r, const std::string& ptr) {
    if (!r.is_string()) fail(ptr, "expected a string");
    const std::string target = r.get<std::string>();
    if (target.rfind('#', 0) != 0) fail(ptr, "only local references ('#/...') are supported: '" + target + "'");
    const auto it = ref_rules_.find(target);
    if (it != ref_rules_.end()) return rule_ref(it->second);
    const OrderedJson* node = &root_;
    const std::string pointer = target.substr(1);
    size_t at = 0;
    while (at < pointer.size()) {
      if (pointer[at] != '/') fail(ptr, "bad JSON pointer '" + target + "'");
      const size_t next = pointer.find('/', at + 1);
      std::string key = pointer.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
      std::string unescaped;
      for (size_t i = 0; i < key.size(); ++i) {
        if (key[i] == '~' && i + 1 < key.size() && (key[i + 1] == '0' || key[i + 1] == '1')) {
          unescaped += key[++i] == '0' ? '~' : '/';
        } else {
          unescaped += key[i];
        }
      }
      if (node->is_object() && node->contains(unescaped)) {
        node = &(*node)[unescaped];
      } else if (node->is_array() && !unescaped.empty() && unescaped.size() <= 18 &&
                 unescaped.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoull(unescaped) < node->size()) {
        node = &(*node)[std::stoull(unescaped)];
      } else {
        fail(ptr, "reference '" + target + "' does not resolve");
      }
      at = next == std::string::npos ? pointer.size() : next;
    }
    std::string name = fresh("ref");
    ref_rules_[target] = name;
    g_.add(name, empty());  // defined first so that recursive references find it
    Expr body = value(*node, pointer);
    for (Rule& rule : g_.rules)
      if (rule.name == name) rule.body = std::move(body);
    return rule_ref(name);
  }

  // ---- enum / const ----------------------------------------------------------------------
  Expr enumeration(const OrderedJson& s, const std::string& ptr) {
    std::vector<OrderedJson> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail(ptr + "/enum", "expected a non-empty array");
      if (s.contains("const")) fail(ptr, "'enum' together with 'const' is not supported");
      for (const auto& v : s["enum"]) values.push_back(v);
    }
    OrderedJson rest = s;
    rest.erase("enum");
    rest.erase("const");
    std::vector<Expr> alts;
    for (const OrderedJson& v : values) {
      if (!json_schema_violation_at(v, rest, root_).empty()) continue;  // excluded by the other keywords
      try {
        alts.push_back(literal_value(v));
      } catch (const nlohmann::json::exception&) {
        fail(ptr, "an enum value holds invalid UTF-8");
      }
    }
    if (alts.empty()) fail(ptr, "no enum / const value satisfies the other keywords");
    return alt(std::move(alts));
  }

  // Exactly this value, with the whitespace policy between the tokens of objects and arrays.
  Expr literal_value(const OrderedJson& v) {
    if (v.is_object()) {
      if (v.empty()) return seq({lit("{"), ws(), lit("}")});
      std::vector<Expr> parts{lit("{"), ws()};
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) parts.insert(parts.end(), {lit(","), ws()});
        first = false;
        parts.insert(parts.end(), {lit(dump(OrderedJson(key))), ws(), lit(":"), ws(), literal_value(item), ws()});
      }
      parts.push_back(lit("}"));
      return seq(std::move(parts));
    }
    if (v.is_array()) {
      if (v.empty()) return seq({lit("["), ws(), lit("]")});
      std::vector<Expr> parts{lit("["), ws()};
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) parts.insert(parts.end(), {lit(","), ws()});
        parts.insert(parts.end(), {literal_value(v[i]), ws()});
      }
      parts.push_back(lit("]"));
      return seq(std::move(parts));
    }
    return lit(dump(v));
  }

  // ---- objects ---------------------------------------------------------------------------
  Expr object(const OrderedJson& s, const std::string& ptr) {
    static const OrderedJson kEmpty = OrderedJson::object();
    const OrderedJson& props = s.contains("properties") ? s["properties"] : kEmpty;
    if (!props.is_object()) fail(ptr + "/properties", "expected an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      const OrderedJson& req = s["required"];
      if (!req.is_array()) fail(ptr + "/required", "expected an array of names");
      for (const auto& name : req) {
        if (!name.is_string()) fail(ptr + "/required", "expected an array of names");
        if (!props.contains(name.get<std::string>()))
          fail(ptr + "/required", "required property '" + name.get<std::string>() + "' is not in properties");
        required.insert(name.get<std::string>());
      }
    }
    std::optional<Expr> extra;  // one additional member, when allowed
    if (s.contains("additionalProperties")) {
      const OrderedJson& ap = s["additionalProperties"];
      if (!(ap.is_boolean() && !ap.get<bool>())) {
        std::vector<std::string> names;
        for (const auto& [key, v] : props.items()) names.push_back(key);
        extra = named("extra", seq({key_not_in(names), ws(), lit(":"), ws(), value(ap, ptr + "/additionalProperties"), ws()}));
      }
    }
    struct Member {
      Expr kv;
      bool required;
    };
    std::vector<Member> members;
    size_t first_required = SIZE_MAX;
    for (const auto& [key, sub] : props.items()) {
      const std::string sub_ptr = ptr + "/properties/" + pointer_token(key);
      Expr kv = seq({lit(dump(OrderedJson(key))), ws(), lit(":"), ws(), value(sub, sub_ptr), ws()});
      const bool req = required.count(key) > 0;
      if (req && first_required == SIZE_MAX) first_required = members.size();
      // Members up to the first required one appear twice (first member or after a comma).
      const size_t i = members.size();
      if (i >= 1 && i <= first_required) kv = named("kv", std::move(kv));
      members.push_back({std::move(kv), req});
    }
    // after[i]: members i.. when one has been written (each then starts with a comma);
    // first[i]: members i.. when none has been written yet.
    const Expr comma = seq({lit(","), ws()});
    Expr after = extra ? star(seq({comma, *extra})) : empty();
    Expr first = extra ? opt(seq({*extra, star(seq({comma, *extra}))})) : empty();
    for (size_t i = members.size(); i-- > 0;) {
      const Member& m = members[i];
      const Expr after_next = after.kind == Expr::Kind::kSeq && after.items.empty() ? empty() : named("after", std::move(after), true);
      if (i <= first_required || first_required == SIZE_MAX) {
        const Expr with = seq({m.kv, after_next});
        first = m.required ? with : alt({with, first});
        if (i != 0) first = named("first", std::move(first), true);
      }
      if (i >= 1) {
        const Expr with = seq({comma, m.kv, after_next});
        after = m.required ? with : alt({with, after_next});
      }
    }
    return seq({lit("{"), ws(), std::move(first), lit("}")});
  }

  // A property name (a JSON string of plain characters, no escapes) that is none of `names`.
  Expr key_not_in(std::vector<std::string> names) {
    std::vector<std::u32string> keys;
    for (const std::string& n : names) {
      std::u32string k;
      bool plain = true;
      for (size_t i = 0; i < n.size();) {
        const char32_t cp = static_cast<unsigned char>(n[i]) < 0x80 ? static_cast<unsigned char>(n[i++]) : next_cp(n, i);
        if (cp < 0x20 || cp == '"' || cp == '\\') plain = false;
        k += cp;
      }
      if (plain) keys.push_back(k);
    }
    std::sort(keys.begin(), keys.end());
    return seq({lit("\""), exclusion(keys, 0, keys.size(), 0)});
  }

  static char32_t next_cp(const std::string& s, size_t& i) {
    const auto b0 = static_cast<unsigned char>(s[i++]);
    const int n = b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : 1;
    char32_t cp = b0 & (0x3F >> n);
    for (int k = 0; k < n && i < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i++]) & 0x3F);
    return cp;
  }

  // The rest of a key (closing quote included) after a prefix of depth d shared by keys[b, e).
  Expr exclusion(const std::vector<std::u32string>& keys, size_t b, size_t e, size_t d) {
    static const std::vector<CodeRange> kPlain = normalize_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
    const Expr free_rest = seq({star(cls(kPlain)), lit("\"")});
    std::vector<Expr> alts;
    bool ends_here = false;
    std::vector<CodeRange> taken;
    for (size_t i = b; i < e;) {
      if (keys[i].size() == d) {
        ends_here = true;
        ++i;
        continue;
      }
      const char32_t c = keys[i][d];
      size_t j = i;
      while (j < e && keys[j].size() > d && keys[j][d] == c) ++j;
      std::string text;
      utf8::append(text, c);
      alts.push_back(seq({lit(text), exclusion(keys, i, j, d + 1)}));
      taken.push_back({c, c});
      i = j;
    }
    if (!ends_here) alts.push_back(lit("\""));
    std::vector<CodeRange> others = kPlain;
    if (!taken.empty()) {
      std::vector<CodeRange> negated = normalize_ranges(taken, true);
      std::vector<CodeRange> both;
      for (const CodeRange& a : kPlain)
        for (const CodeRange& n : negated) {
          const char32_t lo = std::max(a.lo, n.lo), hi = std::min(a.hi, n.hi);
          if (lo <= hi) both.push_back({lo, hi});
        }
      others = both;
    }
    if (!others.empty()) alts.push_back(seq({cls(others), free_rest}));
    return alt(std::move(alts));
  }

  // ---- arrays ----------------------------------------------------------------------------
  uint64_t count(const OrderedJson& s, const char* key, const std::string& ptr, uint64_t fallback) {
    if (!s.contains(key)) return fallback;
    const OrderedJson& v = s[key];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail(ptr + "/" + key, "expected a non-negative integer");
    const uint64_t n = v.get<uint64_t>();
    if (n > kMaxCount && !(fallback == UINT64_MAX && std::string_view(key).rfind("max", 0) == 0))
      fail(ptr + "/" + key, std::to_string(n) + " is above the supported " + std::to_string(kMaxCount));
    return n;
  }

  Expr array(const OrderedJson& s, const std::string& ptr) {
    std::vector<Expr> prefix;
    if (s.contains("prefixItems")) {
      const OrderedJson& p = s["prefixItems"];
      if (!p.is_array()) fail(ptr + "/prefixItems", "expected an array of schemas");
      for (size_t i = 0; i < p.size(); ++i) prefix.push_back(value(p[i], ptr + "/prefixItems/" + std::to_string(i)));
    }
    std::optional<Expr> item;
    if (!s.contains("items")) {
      item = generic_value();
    } else if (s["items"].is_boolean() && !s["items"].get<bool>()) {
      // no items after the prefix
    } else if (s["items"].is_array()) {
      fail(ptr + "/items", "an array of item schemas is the older tuple form: use prefixItems");
    } else {
      item = named("item", value(s["items"], ptr + "/items"));
    }
    const uint64_t k = prefix.size();
    const uint64_t m = count(s, "minItems", ptr, 0);
    uint64_t M = count(s, "maxItems", ptr, UINT64_MAX);
    if (!item) M = std::min(M, k);
    if (M != UINT64_MAX && M > kMaxCount) M = kMaxCount;  // fewer items than allowed: still valid
    if (m > M) fail(ptr, "minItems is above the number of items allowed");
    if (M == 0) return seq({lit("["), ws(), lit("]")});
    auto element = [&](uint64_t j) { return j < k ? prefix[j] : *item; };
    const Expr comma = seq({lit(","), ws()});
    // rest(j): elements j.. after at least one element, each preceded by a comma.
    std::function<Expr(uint64_t)> rest = [&](uint64_t j) -> Expr {
      if (j >= M) return empty();
      if (j >= k) {
        const Expr one = seq({comma, *item, ws()});
        const Expr must = j < m ? repeat(one, static_cast<uint32_t>(m - j), static_cast<uint32_t>(m - j)) : empty();
        const uint64_t from = std::max(j, m);
        const Expr may = M == UINT64_MAX ? star(one) : repeat(one, 0, static_cast<uint32_t>(M - from));
        return seq({must, may});
      }
      const Expr here = seq({comma, element(j), ws(), rest(j + 1)});
      return j < m ? here : opt(here);
    };
    const Expr items = seq({element(0), ws(), rest(1)});
    return seq({lit("["), ws(), m == 0 ? opt(items) : items, lit("]")});
  }

  // ---- strings and numbers ----------------------------------------------------------------
  Expr string(const OrderedJson& s, const std::string& ptr) {
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    const uint64_t lo = count(s, "minLength", ptr, 0);
    const uint64_t hi = count(s, "maxLength", ptr, UINT64_MAX);
    if (lo > hi) fail(ptr, "minLength is above maxLength");
    if (s.contains("pattern")) {
      if (lengths || s.contains("format")) fail(ptr, "'pattern' together with 'format', 'minLength' or 'maxLength' is not supported");
      if (!s["pattern"].is_string()) fail(ptr + "/pattern", "expected a string");
      try {
        return json_pattern_string(s["pattern"].get<std::string>());
      } catch (const Error& e) {
        fail(ptr + "/pattern", e.what());
      }
    }
    if (s.contains("format")) {
      if (lengths) fail(ptr, "'format' together with 'minLength' or 'maxLength' is not supported");
      if (!s["format"].is_string()) fail(ptr + "/format", "expected a string");
      try {
        return json_format_string(s["format"].get<std::string>());
      } catch (const Error& e) {
        fail(ptr + "/format", e.what());
      }
    }
    const uint32_t max = hi == UINT64_MAX ? Expr::kUnbounded : static_cast<uint32_t>(std::min<uint64_t>(hi, kMaxCount));
    return json_string(static_cast<uint32_t>(lo), max);
  }

  // A bound as an integer: minimum rounds up, maximum down (so every generated number is inside).
  std::optional<int64_t> bound(const OrderedJson& s, const char* key, bool lower, bool exclusive, const std::string& ptr) {
    if (!s.contains(key)) return std::nullopt;
    const OrderedJson& v = s[key];
    if (!v.is_number()) fail(ptr + "/" + key, "expected a number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > 1e17) fail(ptr + "/" + key, "bound out of range");
    double r = lower ? std::ceil(d) : std::floor(d);
    if (exclusive && r == d) r += lower ? 1 : -1;
    if (v.is_number_integer()) {
      int64_t i = v.get<int64_t>();
      if (exclusive) i += lower ? 1 : -1;
      return i;
    }
    return static_cast<int64_t>(r);
  }

  Expr number(const OrderedJson& s, const std::string& ptr, bool integer) {
    std::optional<int64_t> lo = bound(s, "minimum", true, false, ptr), hi = bound(s, "maximum", false, false, ptr);
    if (auto x = bound(s, "exclusiveMinimum", true, true, ptr)) lo = lo ? std::max(*lo, *x) : *x;
    if (auto x = bound(s, "exclusiveMaximum", false, true, ptr)) hi = hi ? std::min(*hi, *x) : *x;
    try {
      return integer ? json_integer(lo, hi) : json_number(lo, hi);
    } catch (const Error& e) {
      fail(ptr, e.what());
    }
  }

  const OrderedJson& root_;
  JsonSchemaOptions options_;
  Grammar g_;
  std::map<std::string, std::string> ref_rules_;
  int counter_ = 0;
};

}  // namespace

Grammar json_schema_to_grammar(const OrderedJson& schema, const JsonSchemaOptions& options) {
  try {
    return Translator(schema, options).run();
  } catch (const nlohmann::json::exception& e) {  // e.g. a key that is not UTF-8 in a built value
    throw Error(std::string("json schema: ") + e.what());
  }
}

Grammar json_schema_to_grammar(std::string_view schema_text, const JsonSchemaOptions& options) {
  return json_schema_to_grammar(parse_json_value<OrderedJson>(schema_text, Where{"json schema", "", ""}), options);
}

Grammar json_object_grammar(const JsonSchemaOptions& options) {
  return Translator(OrderedJson::object(), options).generic(true);
}

Grammar json_value_grammar(const JsonSchemaOptions& options) {
  return Translator(OrderedJson::object(), options).generic(false);
}

}  // namespace k3::grammar
