#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <regex>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_detail.h"

namespace k3 {

static_assert(std::endian::native == std::endian::little, "GGUF is read as little-endian");

namespace {

using gguf_detail::kMagic;
using gguf_detail::kMaxDims;
constexpr int kMaxArrayDepth = 32;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims 0, type, offset
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;        // empty key, type, 1-byte value
using gguf_detail::kAlignmentKey;

constexpr std::string_view kTypeNames[] = {"u8", "i8",  "u16", "i16", "u32", "i32", "f32",
                                           "bool", "str", "arr", "u64", "i64", "f64"};

bool valid_type_id(uint32_t id) { return id < std::size(kTypeNames); }

// Smallest encoding of one value of this type (bounds array counts by the bytes left).
uint64_t min_value_bytes(GgufType type) {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::STRING: case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::ARRAY: return 4 + 8;
  }
  return 1;
}

std::string u64s(uint64_t v) { return std::to_string(v); }

// Bytes of a GGUF image, read through pread in 1 MiB windows or straight from memory.
class Source {
 public:
  Source(const File* file, std::span<const uint8_t> memory)
      : file_(file), memory_(memory), size_(file != nullptr ? file->size() : memory.size()) {}

  uint64_t size() const { return size_; }

  // Copies [offset, offset+n), which the caller has checked lies inside the image.
  void copy(uint64_t offset, void* dst, uint64_t n, const char* what) {
    if (n == 0) return;
    if (file_ == nullptr) {
      std::memcpy(dst, memory_.data() + offset, n);
      return;
    }
    if (offset >= window_offset_ && n <= window_.size() && offset - window_offset_ <= window_.size() - n) {
      std::memcpy(dst, window_.data() + (offset - window_offset_), n);
      return;
    }
    if (n >= kWindow) {
      file_->read_at(offset, dst, n, what);
      return;
    }
    window_offset_ = offset;
    window_.resize(std::min<uint64_t>(kWindow, size_ - offset));
    file_->read_at(offset, window_.data(), window_.size(), what);
    std::memcpy(dst, window_.data(), n);
  }

 private:
  static constexpr uint64_t kWindow = 1 << 20;
  const File* file_;
  std::span<const uint8_t> memory_;
  uint64_t size_;
  uint64_t window_offset_ = 0;
  std::vector<uint8_t> window_;
};

}  // namespace

// Sequential reader of the header with error locations (file, tensor, field).
class GgufParser {
 public:
  GgufParser(GgufFile& out, Source& src) : out_(out), src_(src) {}

  void run() {
    out_.file_size_ = src_.size();
    read_preamble();
    const uint64_t n_tensors = read<uint64_t>("tensor_count");
    const uint64_t n_kv = read<uint64_t>("metadata_kv_count");
    check_count(n_tensors, "tensor_count", kMinTensorInfoBytes, "tensors");
    check_count(n_kv, "metadata_kv_count", kMinKeyValueBytes, "metadata entries");
    read_metadata(n_kv);
    read_alignment();
    read_tensor_infos(n_tensors);
    place_tensors();
  }

 private:
  [[noreturn]] void fail(std::string_view field, const std::string& message) const {
    throw Error(Where{out_.path_, tensor_, std::string(field)}, message);
  }

  uint64_t left() const { return src_.size() - pos_; }

  void read_bytes(void* dst, uint64_t n, std::string_view field) {
    if (!range_fits(pos_, n, src_.size())) {
      fail(field, "truncated: needs " + u64s(n) + " bytes at offset " + u64s(pos_) + " but the file has " +
                      u64s(src_.size()) + " bytes");
    }
    src_.copy(pos_, dst, n, "GGUF header");
    pos_ += n;
  }

  template <class T>
  T read(std::string_view field) {
    T v;
    read_bytes(&v, sizeof(T), field);
    return v;
  }

  std::string read_string(std::string_view field) {
    const uint64_t n = read<uint64_t>(field);
    if (n > left()) fail(field, "string length " + u64s(n) + " exceeds the " + u64s(left()) + " bytes left in the file");
    std::string s(n, '\0');
    read_bytes(s.data(), n, field);
    return s;
  }

  void read_preamble() {
    uint8_t magic[4];
    read_bytes(magic, 4, "magic");
    uint32_t m;
    std::memcpy(&m, magic, 4);
    if (m != kMagic) {
      char got[16];
      std::snprintf(got, sizeof got, "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
      fail("magic", std::string("not a GGUF file: expected bytes 47 47 55 46 (\"GGUF\"), got ") + got);
    }
    out_.version_ = read<uint32_t>("version");
    if (out_.version_ != 2 && out_.version_ != 3) {
      fail("version", "GGUF version " + std::to_string(out_.version_) + " is not supported (only 2 and 3)");
    }
  }

  // Rejects a count whose smallest encoding would not fit in the rest of the file.
  void check_count(uint64_t n, std::string_view field, uint64_t min_bytes, const char* what) const {
    if (n > left() / min_bytes) {
      fail(field, u64s(n) + " " + what + " cannot fit in the " + u64s(left()) + " bytes left in the file");
    }
  }

  GgufType read_type_id(std::string_view field, const char* what) {
    const uint32_t id = read<uint32_t>(field);
    if (!valid_type_id(id)) fail(field, std::string("unknown ") + what + " " + std::to_string(id));
    return static_cast<GgufType>(id);
  }

  void read_metadata(uint64_t n_kv) {
    std::unordered_set<std::string> seen;
    out_.metadata_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key = read_string("metadata[" + u64s(i) + "].key");
      if (!seen.insert(key).second) fail(key, "duplicate metadata key");
      const GgufType type = read_type_id(key, "value type");
      GgufValue value = read_value(type, key, 0);
      out_.metadata_.push_back({std::move(key), std::move(value)});
    }
  }

  GgufValue read_value(GgufType type, const std::string& field, int depth) {
    switch (type) {
      case GgufType::U8: return {read<uint8_t>(field)};
      case GgufType::I8: return {read<int8_t>(field)};
      case GgufType::U16: return {read<uint16_t>(field)};
      case GgufType::I16: return {read<int16_t>(field)};
      case GgufType::U32: return {read<uint32_t>(field)};
      case GgufType::I32: return {read<int32_t>(field)};
      case GgufType::F32: return {read<float>(field)};
      case GgufType::U64: return {read<uint64_t>(field)};
      case GgufType::I64: return {read<int64_t>(field)};
      case GgufType::F64: return {read<double>(field)};
      case GgufType::BOOL: {
        const uint8_t b = read<uint8_t>(field);
        if (b > 1) fail(field, "bool value must be 0 or 1, got " + std::to_string(b));
        return {b == 1};
      }
      case GgufType::STRING: return {read_string(field)};
      case GgufType::ARRAY: return {read_array(field, depth + 1)};
    }
    fail(field, "unknown value type");
  }

  GgufArray read_array(const std::string& field, int depth) {
    if (depth > kMaxArrayDepth) fail(field, "arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
    GgufArray array;
    array.elem_type = read_type_id(field, "array element type");
    const uint64_t n = read<uint64_t>(field);
    if (n > left() / min_value_bytes(array.elem_type)) {
      fail(field, "array of " + u64s(n) + " " + std::string(gguf_type_name(array.elem_type)) +
                      " elements cannot fit in the " + u64s(left()) + " bytes left in the file");
    }
    if (const uint64_t size = gguf_packed_size(array.elem_type); size != 0) {
      array.packed.resize(n * size);  // n * size <= left(), checked above
      read_bytes(array.packed.data(), array.packed.size(), field);
      array.count = n;
      if (array.elem_type == GgufType::BOOL) {
        for (uint64_t i = 0; i < n; ++i) {
          if (array.packed[i] > 1) {
            fail(field, "bool element " + u64s(i) + " must be 0 or 1, got " + std::to_string(array.packed[i]));
          }
        }
      }
    } else if (array.elem_type == GgufType::STRING) {
      array.string_ends.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t len = read<uint64_t>(field);
        if (len > left()) {
          fail(field, "string length " + u64s(len) + " exceeds the " + u64s(left()) + " bytes left in the file");
        }
        const size_t at = array.chars.size();
        array.chars.resize(at + len);
        read_bytes(array.chars.data() + at, len, field);
        array.string_ends.push_back(array.chars.size());
      }
      array.chars.shrink_to_fit();
      array.count = n;
    } else {
      array.arrays.reserve(n);
      for (uint64_t i = 0; i < n; ++i) array.arrays.push_back(read_array(field, depth + 1));
      array.count = n;
    }
    return array;
  }

  void read_alignment() {
    const GgufValue* v = out_.find(kAlignmentKey);
    if (v == nullptr) return;
    if (v->type() != GgufType::U32) {
      fail(kAlignmentKey, "must be of type u32, got " + std::string(gguf_type_name(v->type())));
    }
    const uint32_t a = v->get<uint32_t>();
    if (a == 0 || a % 8 != 0) fail(kAlignmentKey, "must be a nonzero multiple of 8, got " + std::to_string(a));
    out_.alignment_ = a;
  }

  void read_tensor_infos(uint64_t n_tensors) {
    std::unordered_set<std::string_view> seen;
    out_.tensors_.resize(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensorInfo& t = out_.tensors_[i];
      t.name = read_string("tensor_info[" + u64s(i) + "].name");
      tensor_ = t.name;
      if (!seen.insert(t.name).second) fail("name", "duplicate tensor name");
      t.n_dims = read<uint32_t>("n_dims");
      if (t.n_dims > kMaxDims) fail("n_dims", "n_dims " + std::to_string(t.n_dims) + " exceeds the maximum of 4");
      for (uint32_t d = 0; d < t.n_dims; ++d) {
        const std::string field = "ne[" + std::to_string(d) + "]";
        t.ne[d] = read<uint64_t>(field);
        if (t.ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          fail(field, field + " = " + u64s(t.ne[d]) + " exceeds the int64 range");
        }
      }
      const uint32_t type_id = read<uint32_t>("type");
      t.type = ggml_type_info(type_id, Where{out_.path_, tensor_, "type"}).type;
      t.offset = read<uint64_t>("offset");
      size_tensor(t);
      if (t.offset % out_.alignment_ != 0) {
        fail("offset", "offset " + u64s(t.offset) + " is not a multiple of the alignment " + u64s(out_.alignment_));
      }
    }
    tensor_.clear();
  }

  // Element count and byte size, refusing any product that does not fit.
  void size_tensor(GgufTensorInfo& t) {
    constexpr uint64_t kMaxElements = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    uint64_t rows = 1;
    for (uint32_t d = 1; d < kMaxDims; ++d) {
      if (t.ne[d] != 0 && rows > kMaxElements / t.ne[d]) fail("ne", "element count overflows int64");
      rows *= t.ne[d];
    }
    if (t.ne[0] != 0 && rows > kMaxElements / t.ne[0]) fail("ne", "element count overflows int64");
    t.n_elements = rows * t.ne[0];
    const uint64_t row_bytes = ggml_row_size(t.type, t.ne[0], Where{out_.path_, tensor_, "ne[0]"});
    if (row_bytes != 0 && rows > std::numeric_limits<uint64_t>::max() / row_bytes) {
      fail("ne", "byte size overflows uint64");
    }
    t.nbytes = row_bytes * rows;
  }

  // Start of the data section, then each tensor's absolute range: inside the file, no overlap.
  void place_tensors() {
    const uint64_t a = out_.alignment_;
    const uint64_t pad = (a - pos_ % a) % a;
    out_.data_offset_ = pos_ + pad;  // pos_ <= file size, so this cannot wrap
    const uint64_t size = src_.size();
    for (GgufTensorInfo& t : out_.tensors_) {
      tensor_ = t.name;
      const bool fits = out_.data_offset_ <= size && range_fits(t.offset, t.nbytes, size - out_.data_offset_);
      if (!fits) {
        fail("offset", "data (" + u64s(t.nbytes) + " bytes at offset " + u64s(t.offset) +
                           " of the data section starting at " + u64s(out_.data_offset_) +
                           ") extends past the end of the file (" + u64s(size) + " bytes)");
      }
      t.file_offset = out_.data_offset_ + t.offset;
    }
    std::vector<const GgufTensorInfo*> order;
    for (const GgufTensorInfo& t : out_.tensors_) {
      if (t.nbytes > 0) order.push_back(&t);
    }
    std::sort(order.begin(), order.end(), [](auto* x, auto* y) { return x->offset < y->offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset) {
        tensor_ = order[i]->name;
        fail("offset", "data overlaps tensor '" + order[i - 1]->name + "'");
      }
    }
    tensor_.clear();
  }

  GgufFile& out_;
  Source& src_;
  uint64_t pos_ = 0;
  std::string tensor_;  // tensor whose info is being read, for error locations
};

// ---- values ------------------------------------------------------------------------------

std::string_view gguf_type_name(GgufType type) {
  const auto id = static_cast<uint32_t>(type);
  return valid_type_id(id) ? kTypeNames[id] : std::string_view("?");
}

std::vector<uint64_t> GgufTensorInfo::shape() const {
  std::vector<uint64_t> s;
  for (uint32_t d = n_dims; d-- > 0;) s.push_back(ne[d]);
  return s;
}

// ---- GgufFile ----------------------------------------------------------------------------

GgufFile GgufFile::open(const std::string& path) {
  GgufFile out;
  out.path_ = path;
  out.file_ = File::open(path);
  Source src(out.file_.get(), {});
  GgufParser(out, src).run();
  return out;
}

GgufFile GgufFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  GgufFile out;
  out.path_ = name;
  out.memory_ = bytes;
  Source src(nullptr, bytes);
  GgufParser(out, src).run();
  return out;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const GgufKeyValue& kv : metadata_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

std::optional<std::string> GgufFile::find_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type() != GgufType::STRING) {
    throw Error(Where{path_, "", std::string(key)},
                "must be a string (found " + std::string(gguf_type_name(v->type())) + ")");
  }
  return v->get<std::string>();
}

std::optional<int64_t> GgufFile::find_integer(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  const Where where{path_, "", std::string(key)};
  return std::visit(
      [&](const auto& x) -> int64_t {
        using V = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<V> && !std::is_same_v<V, bool>) {
          if constexpr (std::is_same_v<V, uint64_t>) {
            if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
              throw Error(where, "value " + std::to_string(x) + " is out of range");
            }
          }
          return static_cast<int64_t>(x);
        } else {
          throw Error(where, "must be an integer (found " + std::string(gguf_type_name(v->type())) + ")");
        }
      },
      v->value);
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::span<const uint8_t> GgufFile::tensor_data(const GgufTensorInfo& t) const {
  if (file_ == nullptr) return memory_.subspan(t.file_offset, t.nbytes);
  return file_->view(t.file_offset, t.nbytes);
}

// ---- split sets --------------------------------------------------------------------------

std::string gguf_split_path(const std::string& prefix, uint32_t index, uint32_t count) {
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "-%05u-of-%05u.gguf", index, count);
  return prefix + suffix;
}

namespace {

// An integer-typed metadata value, or an error naming the key.
int64_t integer_value(const GgufFile& f, const char* key) {
  const std::optional<int64_t> v = f.find_integer(key);
  if (!v) throw Error(Where{f.path(), "", key}, "missing");
  return *v;
}

}  // namespace

GgufModel GgufModel::open(const std::string& path) {
  GgufModel model;
  model.files_.push_back(GgufFile::open(path));
  const GgufFile& first = model.files_.front();
  if (first.find("split.count") != nullptr) {
    const int64_t count = integer_value(first, "split.count");
    if (count < 1 || count > 99999) {
      throw Error(Where{path, "", "split.count"}, "must be in [1, 99999], got " + std::to_string(count));
    }
    const int64_t no = integer_value(first, "split.no");
    if (no != 0) {
      throw Error(Where{path, "", "split.no"},
                  "is " + std::to_string(no) + ": open the first file of the split set (split.no 0)");
    }
    if (count > 1) {
      model.files_.reserve(static_cast<size_t>(count));  // keeps `first` valid
      static const std::regex kPattern(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
      std::smatch m;
      const auto n = static_cast<uint32_t>(count);
      if (!std::regex_match(path, m, kPattern) || m[2].str() != "00001" ||
          std::stoul(m[3].str()) != n) {
        throw Error(Where{path, "", "split.count"},
                    "is " + std::to_string(count) + " but the file name does not end in " +
                        gguf_split_path("", 1, n));
      }
      for (uint32_t i = 2; i <= n; ++i) {
        GgufFile f = GgufFile::open(gguf_split_path(m[1].str(), i, n));
        const int64_t f_no = integer_value(f, "split.no");
        const int64_t f_count = integer_value(f, "split.count");
        if (f_no != i - 1) {
          throw Error(Where{f.path(), "", "split.no"},
                      "is " + std::to_string(f_no) + ", expected " + std::to_string(i - 1));
        }
        if (f_count != count) {
          throw Error(Where{f.path(), "", "split.count"},
                      "is " + std::to_string(f_count) + ", expected " + std::to_string(count));
        }
        model.files_.push_back(std::move(f));
      }
    }
  }
  std::unordered_map<std::string_view, size_t> owner;  // tensor name -> file index
  for (size_t fi = 0; fi < model.files_.size(); ++fi) {
    for (const GgufTensorInfo& t : model.files_[fi].tensors()) {
      const auto [it, fresh] = owner.emplace(t.name, fi);
      if (!fresh) {
        throw Error(Where{model.files_[fi].path(), t.name, ""},
                    "duplicate tensor name (also in " + model.files_[it->second].path() + ")");
      }
      model.index_.emplace(t.name, model.tensors_.size());
      model.tensors_.push_back(t);
      model.tensors_.back().file_index = fi;
    }
  }
  if (model.first().find("split.tensors.count") != nullptr) {
    const int64_t expected = integer_value(model.first(), "split.tensors.count");
    if (expected != static_cast<int64_t>(model.tensors_.size())) {
      throw Error(Where{path, "", "split.tensors.count"},
                  "is " + std::to_string(expected) + " but the split files hold " +
                      std::to_string(model.tensors_.size()) + " tensors");
    }
  }
  return model;
}

const GgufTensorInfo* GgufModel::find_tensor(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> GgufModel::tensor_data(const GgufTensorInfo& tensor) const {
  return files_.at(tensor.file_index).tensor_data(tensor);
}

}  // namespace k3
