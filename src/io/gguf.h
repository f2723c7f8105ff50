// GGUF v2/v3 reader and writer (spec §6.1). Headers are parsed through pread (buffered) or from
// memory; tensor payloads are zero-copy views that map the file on first use. Every count and
// length is bounded by the bytes left in the file before anything is allocated, and every
// offset check is written so that it cannot wrap.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/file.h"
#include "quant/ggml/ggml_types.h"

namespace k3 {

// On-disk ids of metadata value types.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
// "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64".
std::string_view gguf_type_name(GgufType type);

struct GgufValue;

// Homogeneous array; elements may themselves be arrays (of any element types).
struct GgufArray {
  GgufType elem_type = GgufType::U8;
  std::vector<GgufValue> items;
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
  static GgufValue array(GgufType elem_type, std::vector<GgufValue> items);
};

// Same type and value; floats compare bit for bit (so NaN == NaN of the same bits, 0.0 != -0.0).
bool operator==(const GgufValue& a, const GgufValue& b);
bool operator==(const GgufArray& a, const GgufArray& b);

// JSON for `k3 inspect`: numbers exact (64-bit integers as integers), bool, string, nested lists.
nlohmann::json gguf_value_to_json(const GgufValue& value);

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

}  // namespace k3
