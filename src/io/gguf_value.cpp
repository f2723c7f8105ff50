// GGUF metadata values: packed arrays, equality, JSON (DOM for small values, streamed text).
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"

namespace k3 {
uint64_t gguf_packed_size(GgufType type) {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::STRING: case GgufType::ARRAY: return 0;
  }
  return 0;
}

void GgufArray::throw_bad_access(GgufType want, uint64_t i) const {
  if (i >= count) throw Error("GGUF array index " + std::to_string(i) + " is out of range (" + std::to_string(count) + " elements)");
  throw Error("GGUF array of " + std::string(gguf_type_name(elem_type)) + " read as " + std::string(gguf_type_name(want)));
}

std::string_view GgufArray::string_at(uint64_t i) const {
  if (elem_type != GgufType::STRING || i >= count) throw_bad_access(GgufType::STRING, i);
  const uint64_t begin = i == 0 ? 0 : string_ends[i - 1];
  return std::string_view(chars).substr(begin, string_ends[i] - begin);
}

GgufValue GgufArray::item(uint64_t i) const {
  switch (elem_type) {
    case GgufType::U8: return {at<uint8_t>(i)};
    case GgufType::I8: return {at<int8_t>(i)};
    case GgufType::U16: return {at<uint16_t>(i)};
    case GgufType::I16: return {at<int16_t>(i)};
    case GgufType::U32: return {at<uint32_t>(i)};
    case GgufType::I32: return {at<int32_t>(i)};
    case GgufType::F32: return {at<float>(i)};
    case GgufType::BOOL: return {at<bool>(i)};
    case GgufType::U64: return {at<uint64_t>(i)};
    case GgufType::I64: return {at<int64_t>(i)};
    case GgufType::F64: return {at<double>(i)};
    case GgufType::STRING: return {std::string(string_at(i))};
    case GgufType::ARRAY: return {array_at(i)};
  }
  throw_bad_access(elem_type, i);
}

void GgufArray::push(const GgufValue& value) {
  if (value.type() != elem_type) {
    throw Error("GGUF array of " + std::string(gguf_type_name(elem_type)) + " holds a " +
                std::string(gguf_type_name(value.type())) + " element");
  }
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string>) {
          chars += v;
          string_ends.push_back(chars.size());
        } else if constexpr (std::is_same_v<V, GgufArray>) {
          arrays.push_back(v);
        } else {
          const auto* p = reinterpret_cast<const uint8_t*>(&v);
          packed.insert(packed.end(), p, p + sizeof(V));
        }
      },
      value.value);
  ++count;
}

uint64_t GgufArray::bytes() const {
  uint64_t n = packed.capacity() + chars.capacity() + string_ends.capacity() * sizeof(uint64_t) +
               arrays.capacity() * sizeof(GgufArray);
  for (const GgufArray& a : arrays) n += a.bytes();
  return n;
}

uint64_t GgufValue::bytes() const {
  uint64_t n = sizeof(GgufValue);
  if (const auto* s = std::get_if<std::string>(&value)) n += s->capacity();
  if (const auto* a = std::get_if<GgufArray>(&value)) n += a->bytes();
  return n;
}

GgufValue GgufValue::array(GgufType elem_type, const std::vector<GgufValue>& items) {
  GgufArray out;
  out.elem_type = elem_type;
  for (const GgufValue& item : items) out.push(item);
  return {std::move(out)};
}

bool operator==(const GgufArray& a, const GgufArray& b) {
  return a.elem_type == b.elem_type && a.count == b.count && a.packed == b.packed && a.chars == b.chars &&
         a.string_ends == b.string_ends && a.arrays == b.arrays;
}

bool operator==(const GgufValue& a, const GgufValue& b) {
  if (a.type() != b.type()) return false;
  return std::visit(
      [&](const auto& x) {
        using V = std::decay_t<decltype(x)>;
        const V& y = std::get<V>(b.value);
        if constexpr (std::is_floating_point_v<V>) {
          return std::memcmp(&x, &y, sizeof(V)) == 0;
        } else {
          return x == y;
        }
      },
      a.value);
}

namespace {

nlohmann::json scalar_json(const GgufValue& value) {
  return std::visit(
      [](const auto& v) -> nlohmann::json {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, GgufArray>) {
          nlohmann::json list = nlohmann::json::array();
          for (uint64_t i = 0; i < v.size(); ++i) list.push_back(scalar_json(v.item(i)));
          return list;
        } else if constexpr (std::is_same_v<V, uint8_t> || std::is_same_v<V, uint16_t> || std::is_same_v<V, uint32_t>) {
          return static_cast<uint64_t>(v);
        } else if constexpr (std::is_same_v<V, int8_t> || std::is_same_v<V, int16_t> || std::is_same_v<V, int32_t>) {
          return static_cast<int64_t>(v);
        } else if constexpr (std::is_same_v<V, float>) {
          return static_cast<double>(v);
        } else {
          return v;
        }
      },
      value.value);
}

// Streams JSON text in pieces; `ok` turns false once the sink asks to stop.
class JsonStream {
 public:
  explicit JsonStream(const std::function<bool(std::string_view)>& sink) : sink_(sink) {}
  ~JsonStream() = default;

  void value(const GgufValue& v) {
    if (const auto* a = std::get_if<GgufArray>(&v.value)) {
      array(*a);
    } else {
      put(scalar_json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
  void finish() {
    if (ok_ && !buf_.empty()) ok_ = sink_(buf_);
    buf_.clear();
  }

 private:
  void array(const GgufArray& a) {
    put("[");
    for (uint64_t i = 0; i < a.size() && ok_; ++i) {
      if (i > 0) put(",");
      switch (a.elem_type) {
        case GgufType::STRING:
          put(nlohmann::json(std::string(a.string_at(i))).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
          break;
        case GgufType::ARRAY: array(a.array_at(i)); break;
        default: put(scalar_json(a.item(i)).dump()); break;
      }
    }
    put("]");
  }
  void put(std::string_view text) {
    if (!ok_) return;
    buf_ += text;
    if (buf_.size() >= kChunk) finish();
  }

  static constexpr size_t kChunk = 1 << 16;
  const std::function<bool(std::string_view)>& sink_;
  std::string buf_;
  bool ok_ = true;
};

}  // namespace

nlohmann::json gguf_value_to_json(const GgufValue& value) { return scalar_json(value); }

void write_gguf_value_json(const GgufValue& value, const std::function<bool(std::string_view)>& sink) {
  JsonStream out(sink);
  out.value(value);
  out.finish();
}

}  // namespace k3
