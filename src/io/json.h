// JSON documents with strict, typed access. Every error names the file and the key path of the
// value (e.g. field 'text_config.linear_attn_config.kda_layers[3]'), so a config problem is
// reported where it is, not as a generic type error.
//
// Parsing rejects what nlohmann would accept silently: duplicate object keys (it keeps the last)
// and nesting deeper than kMaxJsonDepth. Object members keep their file order (members()), which
// some formats rely on (ModelOpt `quantized_layers`), while lookup by key stays logarithmic.
//
// Typed access is strict: integers are exact 64-bit values (a float such as 4.0 or 1e3 is not an
// integer), booleans are only true/false, doubles accept any JSON number.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace k3 {

using Json = nlohmann::json;

inline constexpr int kMaxJsonDepth = 256;
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{1} << 30;

struct JsonDocument;

// A value inside a parsed document, with the path that leads to it. Cheap to copy; keeps its
// document alive.
class JsonNode {
 public:
  const std::string& file() const;
  // Key path from the root: "" for the root, "a.b[2].c"; keys that are not plain names are
  // written as ["model.layers.0"]. Built on demand (nodes of large maps never pay for it).
  std::string path() const;
  const Json& value() const { return *value_; }
  Where where() const { return Where{file(), "", path()}; }
  [[noreturn]] void fail(const std::string& message) const;

  bool is_null() const { return value_->is_null(); }
  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }
  bool is_string() const { return value_->is_string(); }
  bool is_integer() const { return value_->is_number_integer(); }

  // Object access. All of these fail when this node is not an object.
  bool has(std::string_view key) const;                       // present, possibly null
  JsonNode at(std::string_view key) const;                    // present (possibly null), else fails
  std::optional<JsonNode> find(std::string_view key) const;   // absent -> nullopt
  std::vector<std::pair<std::string, JsonNode>> members() const;  // in file order

  // Array access; fails when this node is not an array.
  std::vector<JsonNode> elements() const;

  // Strict conversion of this value. T is one of: bool, int64_t, uint64_t, double, std::string,
  // std::vector<int64_t>, std::vector<std::string>.
  template <class T>
  T as() const;
  // An integer or a list of integers (token id fields such as eos_token_id).
  std::vector<int64_t> as_int_or_int_list() const;
  // Range-checked integers: an integer in [lo, hi], else fails with "V is out of range [lo, hi]"
  // (V as written in the file, so 2^64-1 is not reported as -1). Every size or count read from a
  // file goes through these before it is narrowed or used in arithmetic.
  int64_t as_int_in(int64_t lo, int64_t hi) const;
  std::vector<int64_t> as_int_list_in(int64_t lo, int64_t hi) const;
  // A finite number in [lo, hi]; fails otherwise with the value and the bounds (%g-short).
  double as_double_in(double lo, double hi) const;
  // This value as an object node; fails for any other kind.
  JsonNode as_object() const;

  // Field access by key, for object nodes:
  //   required: present and not null.
  //   nullable: present; null -> nullopt.
  //   optional(key): absent or null -> nullopt (fields where null means "not set").
  //   optional(key, fallback): absent -> fallback, null is an error. Only for fields that truly
  //   have a default.
  template <class T>
  T required(std::string_view key) const {
    JsonNode child = at(key);
    if (child.is_null()) child.fail("must not be null");
    return child.as<T>();
  }
  template <class T>
  std::optional<T> nullable(std::string_view key) const {
    JsonNode child = at(key);
    if (child.is_null()) return std::nullopt;
    return child.as<T>();
  }
  template <class T>
  std::optional<T> optional(std::string_view key) const {
    std::optional<JsonNode> child = find(key);
    if (!child || child->is_null()) return std::nullopt;
    return child->as<T>();
  }
  template <class T>
  T optional(std::string_view key, T fallback) const {
    std::optional<JsonNode> child = find(key);
    if (!child) return fallback;
    if (child->is_null()) child->fail("must not be null");
    return child->as<T>();
  }
  // Range-checked field access, with the required / optional semantics above.
  int64_t required_int(std::string_view key, int64_t lo, int64_t hi) const {
    JsonNode child = at(key);
    if (child.is_null()) child.fail("must not be null");
    return child.as_int_in(lo, hi);
  }
  std::optional<int64_t> optional_int(std::string_view key, int64_t lo, int64_t hi) const {
    std::optional<JsonNode> child = find(key);
    if (!child || child->is_null()) return std::nullopt;
    return child->as_int_in(lo, hi);
  }
  double required_double(std::string_view key, double lo, double hi) const {
    JsonNode child = at(key);
    if (child.is_null()) child.fail("must not be null");
    return child.as_double_in(lo, hi);
  }
  // A required child object (present, an object).
  JsonNode object(std::string_view key) const { return at(key).as_object(); }

 private:
  friend JsonNode parse_json(std::string_view text, const std::string& file);
  static constexpr size_t kNoIndex = static_cast<size_t>(-1);
  JsonNode(std::shared_ptr<const JsonDocument> doc, const Json* value, std::string parent_path,
           const std::string* key, size_t index)
      : doc_(std::move(doc)), value_(value), parent_path_(std::move(parent_path)), key_(key), index_(index) {}
  void require_object() const;

  std::shared_ptr<const JsonDocument> doc_;
  const Json* value_;
  // The path is parent_path_ followed by the member key_ (owned by the document) or the array
  // element index_; neither for the root.
  std::string parent_path_;
  const std::string* key_ = nullptr;
  size_t index_ = kNoIndex;
};

template <> bool JsonNode::as<bool>() const;
template <> int64_t JsonNode::as<int64_t>() const;
template <> uint64_t JsonNode::as<uint64_t>() const;
template <> double JsonNode::as<double>() const;
template <> std::string JsonNode::as<std::string>() const;
template <> std::vector<int64_t> JsonNode::as<std::vector<int64_t>>() const;
template <> std::vector<std::string> JsonNode::as<std::vector<std::string>>() const;

// Parses `text`; `file` is the name errors carry. Bad JSON -> k3::Error whose message gives the
// line and column ("invalid JSON at line 3, column 7: syntax error ...").
JsonNode parse_json(std::string_view text, const std::string& file);
// Reads and parses a file (at most kMaxJsonFileBytes).
JsonNode load_json_file(const std::string& path);

// Untrusted JSON text (a request body, a JSON string inside one, a tokenizer config) into a plain
// nlohmann value, J = Json or nlohmann::ordered_json, under parse_json's limits: nesting deeper than
// kMaxJsonDepth fails naming the field where it happens; a syntax error reads "FILE: invalid JSON
// at line L, column C: REASON". `where` names the source: its file and, for JSON text held in a
// string field, that field (paths inside the text are appended to it). Building is iterative, so
// no input recurses on the stack.
template <class J>
J parse_json_value(std::string_view text, const Where& where);
// The same, except that text which is not JSON gives nullopt (too deep still throws).
template <class J>
std::optional<J> try_parse_json_value(std::string_view text, const Where& where);

}  // namespace k3
