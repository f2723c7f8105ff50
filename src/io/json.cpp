#include "io/json.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "io/file.h"

namespace k3 {

// The parsed tree plus, for every object, its members in file order (nlohmann::json sorts keys;
// nlohmann::ordered_json keeps order but inserts in linear time, which is quadratic on the large
// maps of real checkpoints). Object storage is heap-allocated and never moves after parsing, so
// its address identifies it.
struct JsonDocument {
  using Member = Json::object_t::value_type;
  std::string file;
  Json root;
  std::unordered_map<const Json::object_t*, std::vector<const Member*>> member_order;
};

namespace {

bool is_plain_key(std::string_view key) {
  if (key.empty()) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::string key_path(const std::string& parent, std::string_view key) {
  if (!is_plain_key(key)) return parent + "[" + Json(std::string(key)).dump(-1, ' ', true) + "]";
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

// A short description of a value for "expected X, got Y" messages.
std::string describe(const Json& value) {
  switch (value.type()) {
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: {
      std::string text = value.dump(-1, ' ', true);
      constexpr size_t kMax = 48;
      if (text.size() > kMax) text = text.substr(0, kMax) + "...";
      return "the string " + text;
    }
    default: return value.dump();  // null, true/false, numbers
  }
}

// nlohmann messages look like "[json.exception.parse_error.101] parse error at line 3, column 0:
// syntax error ..."; keep what follows the tag and nlohmann's own position.
std::string reason_of(const std::string& what) {
  size_t tag_end = what.find("] ");
  std::string reason = tag_end == std::string::npos ? what : what.substr(tag_end + 2);
  if (reason.rfind("parse error", 0) == 0) {
    size_t colon = reason.find(": ");
    if (colon != std::string::npos) reason = reason.substr(colon + 2);
  }
  for (char& c : reason)  // it may quote input text: keep the message on one line
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return reason;
}

// "invalid JSON at line L, column C: REASON" for a syntax error at `byte` (1-based) of `text`.
// The offending character is the last one read; nlohmann's own column restarts at 0 when its
// lookahead passed a newline, so the position is computed here.
Error syntax_error(const Where& where, std::string_view text, size_t byte, const nlohmann::detail::exception& e) {
  size_t pos = std::min<size_t>(byte == 0 ? 0 : byte - 1, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return Error(where, "invalid JSON at line " + std::to_string(line) + ", column " +
                          std::to_string(pos - line_start + 1) + ": " + reason_of(e.what()));
}

// Builds the tree from nlohmann's SAX events, recording member order as keys are inserted,
// rejecting duplicate keys and excessive nesting, and turning syntax errors into k3::Error with the
// line and column.
class DomBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  DomBuilder(JsonDocument& doc, std::string_view text) : doc_(doc), text_(text) {}

  bool null() { return scalar(Json(nullptr)); }
  bool boolean(bool v) { return scalar(Json(v)); }
  bool number_integer(number_integer_t v) { return scalar(Json(v)); }
  bool number_unsigned(number_unsigned_t v) { return scalar(Json(v)); }
  bool number_float(number_float_t v, const string_t&) { return scalar(Json(v)); }
  bool string(string_t& v) { return scalar(Json(std::move(v))); }
  bool binary(binary_t& v) { return scalar(Json::binary(std::move(v))); }  // not produced by JSON text

  bool start_object(std::size_t) {
    check_depth();
    open_.push_back(put(Json::object()));
    orders_.emplace_back();
    return true;
  }
  bool key(string_t& key) {
    auto [it, inserted] = open_.back()->get_ref<Json::object_t&>().emplace(std::move(key), Json());
    if (!inserted) fail("duplicate object key " + Json(it->first).dump(-1, ' ', true));
    orders_.back().push_back(&*it);
    pending_member_ = &it->second;
    return true;
  }
  bool end_object() {
    doc_.member_order[&open_.back()->get_ref<const Json::object_t&>()] = std::move(orders_.back());
    orders_.pop_back();
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    check_depth();
    open_.push_back(put(Json::array()));
    return true;
  }
  bool end_array() {
    open_.pop_back();
    return true;
  }
  [[noreturn]] bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception& e) {
    throw syntax_error(Where{doc_.file, "", ""}, text_, byte, e);
  }

 private:
  bool scalar(Json&& value) {
    put(std::move(value));
    return true;
  }

  // Places a value at the current position (the root, the next array element or the member whose
  // key came last) and returns where it now lives. Containers on open_ never move: an array only
  // grows while it is the innermost open container, and map nodes are stable.
  Json* put(Json&& value) {
    if (open_.empty()) {
      doc_.root = std::move(value);
      return &doc_.root;
    }
    Json* top = open_.back();
    if (top->is_array()) {
      Json::array_t& array = top->get_ref<Json::array_t&>();
      array.push_back(std::move(value));
      return &array.back();
    }
    *pending_member_ = std::move(value);
    return pending_member_;
  }

  void check_depth() const {
    if (open_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      fail("nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
  }

  [[noreturn]] void fail(const std::string& detail) const {
    throw Error(Where{doc_.file, "", ""}, "invalid JSON: " + detail);
  }

  JsonDocument& doc_;
  std::string_view text_;
  std::vector<Json*> open_;                                       // open containers, innermost last
  std::vector<std::vector<const JsonDocument::Member*>> orders_;  // member order of each open object
  Json* pending_member_ = nullptr;
};

// Builds a plain nlohmann value from SAX events under the nesting limit, tracking where each value
// sits so a too-deep error names its field. Keys repeat as in Python's json.loads: the last value
// wins, in the first one's place. Member insertion is amortised constant time for both object
// kinds (ordered_json's own insertion searches linearly, quadratic on wide objects).
template <class J>
class LimitedBuilder {
 public:
  using number_integer_t = typename J::number_integer_t;
  using number_unsigned_t = typename J::number_unsigned_t;
  using number_float_t = typename J::number_float_t;
  using string_t = typename J::string_t;
  using binary_t = typename J::binary_t;
  using object_t = typename J::object_t;
  using array_t = typename J::array_t;

  LimitedBuilder(J& result, std::string_view text, const Where& where) : result_(result), text_(text), where_(where) {}

  bool null() { return put(J(nullptr)), true; }
  bool boolean(bool v) { return put(J(v)), true; }
  bool number_integer(number_integer_t v) { return put(J(v)), true; }
  bool number_unsigned(number_unsigned_t v) { return put(J(v)), true; }
  bool number_float(number_float_t v, const string_t&) { return put(J(v)), true; }
  bool string(string_t& v) { return put(J(std::move(v))), true; }
  bool binary(binary_t& v) { return put(J::binary(std::move(v))), true; }
  bool start_object(std::size_t) { return open(J::object(), false), true; }
  bool key(string_t& k) {
    frames_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return frames_.pop_back(), true; }
  bool start_array(std::size_t) { return open(J::array(), true), true; }
  bool end_array() { return frames_.pop_back(), true; }
  bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception& e) {
    if (!throw_syntax_) {
      syntax_failed_ = true;
      return false;
    }
    throw syntax_error(Where{where_.file, where_.tensor, ""}, text_, byte, e);
  }

  bool throw_syntax_ = true;
  bool syntax_failed_ = false;

 private:
  struct Frame {
    J* value;  // never moves while open: its parent only grows after it closes
    bool array;
    std::string key;                                   // object: the key of the member being read
    std::unordered_map<std::string, size_t> position;  // object: key -> member index
  };

  // Places a value at the current position and returns where it now lives.
  J* put(J&& value) {
    if (frames_.empty()) {
      result_ = std::move(value);
      return &result_;
    }
    Frame& f = frames_.back();
    if (f.array) {
      array_t& array = f.value->template get_ref<array_t&>();
      array.push_back(std::move(value));
      return &array.back();
    }
    object_t& object = f.value->template get_ref<object_t&>();
    if constexpr (std::is_same_v<J, nlohmann::ordered_json>) {
      auto& members = static_cast<typename object_t::Container&>(object);
      auto [it, fresh] = f.position.try_emplace(f.key, members.size());
      if (fresh) {
        members.emplace_back(f.key, std::move(value));
        return &members.back().second;
      }
      members[it->second].second = std::move(value);
      return &members[it->second].second;
    } else {
      J& slot = object[f.key];
      slot = std::move(value);
      return &slot;
    }
  }

  void open(J&& container, bool array) {
    if (frames_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      throw Error(Where{where_.file, where_.tensor, current_path()},
                  "invalid JSON: nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    J* at = put(std::move(container));
    frames_.push_back(Frame{at, array, {}, {}});
  }

  // The path of the value being opened (the last element or member of each open container),
  // shortened to its first levels.
  std::string current_path() const {
    constexpr size_t kMaxShown = 12;
    std::string path = where_.field;
    for (size_t i = 0; i < frames_.size() && i < kMaxShown; ++i) {
      const Frame& f = frames_[i];
      path = f.array ? path + "[" + std::to_string(f.value->size() - (i + 1 < frames_.size() ? 1 : 0)) + "]"
                     : key_path(path, f.key);
    }
    if (frames_.size() > kMaxShown) path += "...";
    return path;
  }

  J& result_;
  std::string_view text_;
  const Where& where_;
  std::vector<Frame> frames_;
};

template <class J>
std::optional<J> parse_limited(std::string_view text, const Where& where, bool throw_syntax) {
  J result;
  LimitedBuilder<J> builder(result, text, where);
  builder.throw_syntax_ = throw_syntax;
  J::sax_parse(text.begin(), text.end(), &builder);
  if (builder.syntax_failed_) return std::nullopt;
  return result;
}

}  // namespace

const std::string& JsonNode::file() const { return doc_->file; }

std::string JsonNode::path() const {
  if (key_ != nullptr) return key_path(parent_path_, *key_);
  if (index_ != kNoIndex) return parent_path_ + "[" + std::to_string(index_) + "]";
  return parent_path_;
}

void JsonNode::fail(const std::string& message) const { throw Error(where(), message); }

void JsonNode::require_object() const {
  if (!value_->is_object()) fail("expected an object, got " + describe(*value_));
}

bool JsonNode::has(std::string_view key) const {
  require_object();
  return value_->find(key) != value_->end();
}

std::optional<JsonNode> JsonNode::find(std::string_view key) const {
  require_object();
  const Json::object_t& object = value_->get_ref<const Json::object_t&>();
  auto it = object.find(key);
  if (it == object.end()) return std::nullopt;
  return JsonNode(doc_, &it->second, path(), &it->first, kNoIndex);
}

JsonNode JsonNode::at(std::string_view key) const {
  std::optional<JsonNode> found = find(key);
  if (!found) throw Error(Where{file(), "", key_path(path(), key)}, "missing required field");
  return *found;
}

std::vector<std::pair<std::string, JsonNode>> JsonNode::members() const {
  require_object();
  const auto& order = doc_->member_order.at(&value_->get_ref<const Json::object_t&>());
  const std::string base = path();
  std::vector<std::pair<std::string, JsonNode>> out;
  out.reserve(order.size());
  for (const JsonDocument::Member* member : order) {
    out.emplace_back(member->first, JsonNode(doc_, &member->second, base, &member->first, kNoIndex));
  }
  return out;
}

std::vector<JsonNode> JsonNode::elements() const {
  if (!value_->is_array()) fail("expected an array, got " + describe(*value_));
  const std::string base = path();
  std::vector<JsonNode> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i) out.push_back(JsonNode(doc_, &(*value_)[i], base, nullptr, i));
  return out;
}

JsonNode JsonNode::as_object() const {
  require_object();
  return *this;
}

template <>
bool JsonNode::as<bool>() const {
  if (!value_->is_boolean()) fail("expected true or false, got " + describe(*value_));
  return value_->get<bool>();
}

template <>
int64_t JsonNode::as<int64_t>() const {
  if (value_->is_number_unsigned()) {
    uint64_t v = value_->get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail("integer " + std::to_string(v) + " does not fit a signed 64-bit value");
    }
    return static_cast<int64_t>(v);
  }
  if (!value_->is_number_integer()) fail("expected an integer, got " + describe(*value_));
  return value_->get<int64_t>();
}

template <>
uint64_t JsonNode::as<uint64_t>() const {
  if (value_->is_number_unsigned()) return value_->get<uint64_t>();
  if (value_->is_number_integer()) fail("expected a non-negative integer, got " + describe(*value_));
  fail("expected an integer, got " + describe(*value_));
}

template <>
double JsonNode::as<double>() const {
  if (!value_->is_number()) fail("expected a number, got " + describe(*value_));
  return value_->get<double>();
}

template <>
std::string JsonNode::as<std::string>() const {
  if (!value_->is_string()) fail("expected a string, got " + describe(*value_));
  return value_->get<std::string>();
}

template <>
std::vector<int64_t> JsonNode::as<std::vector<int64_t>>() const {
  std::vector<int64_t> out;
  for (const JsonNode& element : elements()) out.push_back(element.as<int64_t>());
  return out;
}

template <>
std::vector<std::string> JsonNode::as<std::vector<std::string>>() const {
  std::vector<std::string> out;
  for (const JsonNode& element : elements()) out.push_back(element.as<std::string>());
  return out;
}

std::vector<int64_t> JsonNode::as_int_or_int_list() const {
  if (value_->is_array()) return as<std::vector<int64_t>>();
  if (!value_->is_number_integer()) fail("expected an integer or a list of integers, got " + describe(*value_));
  return {as<int64_t>()};
}

int64_t JsonNode::as_int_in(int64_t lo, int64_t hi) const {
  std::string range = "[";  // built piecewise: GCC 12 warns (-Wrestrict) on "[" + std::string
  range += std::to_string(lo);
  range += ", ";
  range += std::to_string(hi);
  range += "]";
  if (value_->is_number_unsigned()) {
    uint64_t v = value_->get<uint64_t>();
    if (hi < 0 || v > static_cast<uint64_t>(hi)) fail(std::to_string(v) + " is out of range " + range);
    int64_t value = static_cast<int64_t>(v);
    if (value < lo) fail(std::to_string(v) + " is out of range " + range);
    return value;
  }
  if (!value_->is_number_integer()) fail("expected an integer, got " + describe(*value_));
  int64_t value = value_->get<int64_t>();
  if (value < lo || value > hi) fail(std::to_string(value) + " is out of range " + range);
  return value;
}

std::vector<int64_t> JsonNode::as_int_list_in(int64_t lo, int64_t hi) const {
  std::vector<int64_t> out;
  for (const JsonNode& element : elements()) out.push_back(element.as_int_in(lo, hi));
  return out;
}

double JsonNode::as_double_in(double lo, double hi) const {
  const double value = as<double>();
  if (!(value >= lo && value <= hi)) {
    const std::string shown = value_->is_number_float() ? short_number(value) : value_->dump();
    fail(shown + " is out of range [" + short_number(lo) + ", " + short_number(hi) + "]");
  }
  return value;
}

JsonNode parse_json(std::string_view text, const std::string& file) {
  auto doc = std::make_shared<JsonDocument>();
  doc->file = file;
  DomBuilder builder(*doc, text);
  Json::sax_parse(text.begin(), text.end(), &builder);
  const Json* root = &doc->root;
  return JsonNode(std::move(doc), root, "", nullptr, JsonNode::kNoIndex);
}

JsonNode load_json_file(const std::string& path) {
  std::shared_ptr<File> file = File::open(path);
  if (file->size() > kMaxJsonFileBytes) {
    throw Error(Where{path, "", ""}, "JSON file of " + std::to_string(file->size()) + " bytes exceeds the limit of " +
                                         std::to_string(kMaxJsonFileBytes) + " bytes");
  }
  std::vector<uint8_t> bytes = file->read_range(0, file->size(), "json");
  return parse_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

}  // namespace k3

namespace k3 {

template <class J>
J parse_json_value(std::string_view text, const Where& where) {
  return *parse_limited<J>(text, where, true);
}

template <class J>
std::optional<J> try_parse_json_value(std::string_view text, const Where& where) {
  return parse_limited<J>(text, where, false);
}

template Json parse_json_value<Json>(std::string_view, const Where&);
template nlohmann::ordered_json parse_json_value<nlohmann::ordered_json>(std::string_view, const Where&);
template std::optional<Json> try_parse_json_value<Json>(std::string_view, const Where&);
template std::optional<nlohmann::ordered_json> try_parse_json_value<nlohmann::ordered_json>(std::string_view,
                                                                                          const Where&);

}  // namespace k3
