// GGUF v2/v3 reader and writer (spec §6.1). Headers are parsed through pread (buffered) or from
// memory; tensor payloads are zero-copy views that map the file on first use. Every count and
// length is bounded by the bytes left in the file before anything is allocated, and every
// offset check is written so that it cannot wrap.
#pragma once

#include <array>
#include <cstring>
#include <functional>
#include <type_traits>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/file.h"
#include "io/ggml_types.h"
#include "io/positional_file.h"

namespace k3 {

// On-disk ids of metadata value types.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
// "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64".
std::string_view gguf_type_name(GgufType type);

struct GgufValue;

// Homogeneous array, stored packed so that memory stays proportional to the encoding: numeric
// and bool elements as their little-endian bytes, strings concatenated with end offsets, nested
// arrays (whose element types may differ) as a vector.
struct GgufArray {
  GgufType elem_type = GgufType::U8;
  uint64_t count = 0;
  std::vector<uint8_t> packed;       // numeric / bool: count · element size bytes
  std::string chars;                 // strings: all elements back to back
  std::vector<uint64_t> string_ends; // strings: end of element i in chars
  std::vector<GgufArray> arrays;     // nested arrays

  uint64_t size() const { return count; }
  // Element i of a numeric or bool array; T must be elem_type's C++ type (throws k3::Error otherwise).
  template <class T>
  T at(uint64_t i) const;
  std::string_view string_at(uint64_t i) const;
  const GgufArray& array_at(uint64_t i) const { return arrays.at(i); }
  // Element i as a value (a copy; for nested arrays the whole sub-array).
  GgufValue item(uint64_t i) const;
  // Appends a value of elem_type (throws k3::Error naming both types otherwise).
  void push(const GgufValue& value);
  // Heap bytes held (the in-memory cost of the array).
  uint64_t bytes() const;

  [[noreturn]] void throw_bad_access(GgufType want, uint64_t i) const;
};

// A typed metadata value. The variant index equals the GgufType id.
struct GgufValue {
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
                               GgufArray, uint64_t, int64_t, double>;
  Storage value;

  GgufType type() const { return static_cast<GgufType>(value.index()); }
  template <class T>
  const T& get() const { return std::get<T>(value); }
  // Builds an array after checking that every item has elem_type (throws k3::Error otherwise).
  static GgufValue array(GgufType elem_type, const std::vector<GgufValue>& items);
  // Heap + inline bytes held by the value.
  uint64_t bytes() const;
};

// Byte size of one packed element of a numeric or bool type; 0 for str and arr.
uint64_t gguf_packed_size(GgufType type);

template <class T>
T GgufArray::at(uint64_t i) const {
  constexpr GgufType want = std::is_same_v<T, uint8_t>    ? GgufType::U8
                            : std::is_same_v<T, int8_t>   ? GgufType::I8
                            : std::is_same_v<T, uint16_t> ? GgufType::U16
                            : std::is_same_v<T, int16_t>  ? GgufType::I16
                            : std::is_same_v<T, uint32_t> ? GgufType::U32
                            : std::is_same_v<T, int32_t>  ? GgufType::I32
                            : std::is_same_v<T, float>    ? GgufType::F32
                            : std::is_same_v<T, bool>     ? GgufType::BOOL
                            : std::is_same_v<T, uint64_t> ? GgufType::U64
                            : std::is_same_v<T, int64_t>  ? GgufType::I64
                                                          : GgufType::F64;
  static_assert(std::is_arithmetic_v<T>, "GgufArray::at reads numeric or bool elements");
  if (elem_type != want || i >= count) throw_bad_access(want, i);
  T v;
  std::memcpy(&v, packed.data() + i * sizeof(T), sizeof(T));
  return v;
}

// Same type and value; floats compare bit for bit (so NaN == NaN of the same bits, 0.0 != -0.0).
bool operator==(const GgufValue& a, const GgufValue& b);
bool operator==(const GgufArray& a, const GgufArray& b);

// JSON for `k3 inspect`: numbers exact (64-bit integers as integers), bool, string, nested lists.
// Builds a DOM: for small values only (tests); large ones go through write_gguf_value_json.
nlohmann::json gguf_value_to_json(const GgufValue& value);
// The same JSON as compact text, handed to `sink` in pieces of at most about 64 KiB (invalid
// UTF-8 in strings replaced by U+FFFD); stops as soon as `sink` returns false. Memory stays
// bounded whatever the array size.
void write_gguf_value_json(const GgufValue& value, const std::function<bool(std::string_view)>& sink);

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  std::array<uint64_t, 4> ne{1, 1, 1, 1};  // ggml order, ne[0] contiguous; unused dims are 1
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;       // as stored: relative to the file's data section
  uint64_t file_offset = 0;  // absolute position in its file
  uint64_t nbytes = 0;
  uint64_t n_elements = 0;
  size_t file_index = 0;  // which file of a split set holds it

  // numpy-style shape, slowest dimension first (reverse of ne[0..n_dims)).
  std::vector<uint64_t> shape() const;
};

// One parsed GGUF file.
class GgufFile {
 public:
  static constexpr uint64_t kDefaultAlignment = 32;

  // Parses the header of a file via pread; maps nothing.
  static GgufFile open(const std::string& path);
  // Parses a file image held in memory (for fuzzing and tests); `bytes` must outlive the object.
  static GgufFile parse(std::span<const uint8_t> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute start of the data section
  uint64_t file_size() const { return file_size_; }

  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;  // nullptr when absent
  // Typed lookups: nullopt when absent; a value of another type throws k3::Error naming the
  // file and key ("must be a string (found u32)").
  std::optional<std::string> find_string(std::string_view key) const;
  // Any integer type (not bool); a u64 above the int64 range throws.
  std::optional<int64_t> find_integer(std::string_view key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Zero-copy bytes of a tensor of this file (maps the file on first use).
  std::span<const uint8_t> tensor_data(const GgufTensorInfo& tensor) const;

 private:
  friend class GgufParser;
  std::string path_;
  std::shared_ptr<File> file_;          // null when parsed from memory
  std::span<const uint8_t> memory_;     // the image when parsed from memory
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
};

// A model stored in one GGUF file or in a gguf-split set `<prefix>-00001-of-0000N.gguf` ...
// (`split.no` 0-based, `split.count`, `split.tensors.count` in the first file). Metadata comes
// from the first file; tensors from all, in file order, with file_index set.
class GgufModel {
 public:
  // `path` is a single file or the first file of a split set.
  static GgufModel open(const std::string& path);

  const std::vector<GgufFile>& files() const { return files_; }
  const GgufFile& first() const { return files_.front(); }
  const std::vector<GgufKeyValue>& metadata() const { return first().metadata(); }
  const GgufValue* find(std::string_view key) const { return first().find(key); }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  std::span<const uint8_t> tensor_data(const GgufTensorInfo& tensor) const;

 private:
  std::vector<GgufFile> files_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
};

// Path of split `index` (1-based) of `count` next to `prefix`: "<prefix>-%05d-of-%05d.gguf".
std::string gguf_split_path(const std::string& prefix, uint32_t index, uint32_t count);

// Writes GGUF files. Alignment is taken from `general.alignment` (u32) when set, else 32.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  // Throws k3::Error on a duplicate key.
  void set(const std::string& key, GgufValue value);
  // Copies the packed bytes; checks the type's block size and that data has exactly the size
  // ne implies; throws on a duplicate name.
  void add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne, std::span<const uint8_t> data);

  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    std::vector<uint8_t> data;
  };
  uint64_t alignment() const;

  uint32_t version_;
  std::vector<GgufKeyValue> metadata_;
  std::vector<Tensor> tensors_;
};

// A GGUF file written header first, for outputs too large to hold (k3 quantize): metadata and
// tensors are declared (with GgufWriter's checks), open() writes everything before the data
// section, then payloads arrive in any order and in pieces, each written in place. The file is
// byte for byte what GgufWriter writes for the same metadata, tensors and data.
class GgufStreamWriter {
 public:
  explicit GgufStreamWriter(uint32_t version = 3);
  ~GgufStreamWriter();
  GgufStreamWriter(GgufStreamWriter&&) noexcept;
  GgufStreamWriter& operator=(GgufStreamWriter&&) noexcept;

  void set(const std::string& key, GgufValue value);
  // Returns the tensor's index (declaration order).
  size_t declare(std::string name, GgmlType type, std::vector<uint64_t> ne);
  uint64_t nbytes(size_t index) const { return tensors_.at(index).payload.nbytes; }
  const std::string& name(size_t index) const { return tensors_.at(index).name; }
  GgmlType type(size_t index) const { return tensors_.at(index).type; }
  size_t size() const { return tensors_.size(); }
  // The size of the whole file from the declarations.
  uint64_t file_size() const;

  void open(const std::string& path);
  // Writes `bytes` at `offset` inside tensor `index`'s payload; throws past its end.
  void write(size_t index, uint64_t offset, std::span<const uint8_t> bytes);
  // Throws naming the first tensor whose payload was not written whole (unless kHeadersOnly); then
  // closes the file.
  void close(PayloadPolicy policy = PayloadPolicy::kWhole);

 private:
  struct Declared {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
    PayloadExtent payload;
  };
  uint32_t version_;
  std::vector<GgufKeyValue> metadata_;
  std::vector<Declared> tensors_;
  std::unordered_set<std::string> names_;
  std::unique_ptr<PositionalFile> file_;
};

}  // namespace k3
