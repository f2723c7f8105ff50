// safetensors: dtypes, a validating zero-copy reader, sharded checkpoints and a writer.
//
// File layout (spec §1.1): u64 little-endian header length n, n bytes of UTF-8 JSON, then the
// data buffer. The reader applies the reference reader's rules — n ≤ 100'000'000 and inside the
// file, valid UTF-8, a JSON object without duplicate keys, tensor entries {dtype, shape,
// data_offsets}, offsets tiling the buffer contiguously from 0 in offset order, byte size ==
// numel × dtype size, last end == buffer size, `__metadata__` a flat string → string map.
// Deliberate strictness beyond the reference: unknown fields inside a tensor entry are errors.
// Every error is a k3::Error naming the file, the tensor and the field.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "io/file.h"

namespace k3 {

// Every dtype of the reference implementation, in its declaration order: the writer lays out
// tensors by descending position in this order (then by name), as the reference writer does.
enum class Dtype : uint8_t {
  BOOL,
  F4,  // fp4 e2m1, 4 bits per element, packed: a tensor's bit count must be a multiple of 8
  F6_E2M3,  // 6 bits per element, packed likewise
  F6_E3M2,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,  // e4m3fn
  F8_E8M0,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  C64,  // complex64: two f32
  F64,
  I64,
  U64,
};
inline constexpr int kDtypeCount = static_cast<int>(Dtype::U64) + 1;

// Throws k3::Error(where, "unknown dtype 'X'") for a string that names no dtype.
Dtype dtype_from_string(std::string_view name, const Where& where);
std::string_view dtype_name(Dtype dtype);
uint32_t dtype_bits(Dtype dtype);
// Bytes per element; throws for the sub-byte dtypes (F4, F6_*), which only have a bit size.
uint64_t dtype_size_bytes(Dtype dtype);
// Payload bytes of a tensor; throws (naming `where`) when the element count or the byte count
// overflows 64 bits, or when a sub-byte tensor does not fill whole bytes.
uint64_t tensor_nbytes(Dtype dtype, std::span<const uint64_t> shape, const Where& where);

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::U8;
  std::vector<uint64_t> shape;  // outermost first; {} is a scalar
  uint64_t offset = 0;          // absolute file offset of the first payload byte
  uint64_t nbytes = 0;
  uint64_t numel() const;
};

// Transparent hashing so that lookups by string_view do not allocate.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using NameIndex = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

// The validated header of one file.
struct SafetensorsHeader {
  uint64_t header_len = 0;                      // n: the JSON occupies [8, 8 + n)
  std::vector<TensorInfo> tensors;              // in offset order
  std::map<std::string, std::string> metadata;  // `__metadata__`
  NameIndex index;                              // name → position in `tensors`
};

inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// Checks the 8-byte length prefix of a file of file_size bytes; returns n. `path` names errors.
uint64_t safetensors_header_len(std::span<const uint8_t> prefix, uint64_t file_size, const std::string& path);
// Parses and validates the JSON header (n bytes) of a file of file_size bytes.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> json, uint64_t file_size,
                                           const std::string& path);
// Both steps over a whole file held in memory (the fuzz target's entry).
SafetensorsHeader parse_safetensors_buffer(std::span<const uint8_t> file, const std::string& path);

// One safetensors file. Opening reads the header with pread only; the payload is mapped on the
// first data() call that needs bytes.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint64_t file_size() const { return file_->size(); }
  uint64_t header_len() const { return header_.header_len; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  const TensorInfo* find(std::string_view name) const;
  // Throws "no tensor named 'X'" naming this file.
  const TensorInfo& at(std::string_view name) const;
  // Zero-copy view of a tensor's payload (info must come from this file).
  std::span<const uint8_t> data(const TensorInfo& info) const;

 private:
  SafetensorsFile(std::shared_ptr<File> file, SafetensorsHeader header)
      : file_(std::move(file)), header_(std::move(header)) {}
  std::shared_ptr<File> file_;
  SafetensorsHeader header_;
};

// A checkpoint: one safetensors file, or shards tied together by model.safetensors.index.json.
// open(path) accepts
//   * a safetensors file, or an index file (name ending in ".index.json") with its shards beside it;
//   * a directory holding model.safetensors.index.json (used even when other files exist);
//   * otherwise a directory holding model.safetensors, or exactly one *.safetensors file.
// A directory with several *.safetensors files and no index is an error (the set is ambiguous).
// With an index: a listed shard missing on disk, a listed tensor missing from its shard, a tensor
// in a shard that the index does not list or lists elsewhere, and a name in two shards are errors.
// Shards are opened in parallel, headers only.
class SafetensorsCheckpoint {
 public:
  struct Entry {
    uint32_t shard;   // index into shards()
    uint32_t tensor;  // index into shards()[shard].tensors()
  };

  static SafetensorsCheckpoint open(const std::string& path);

  // Empty when the checkpoint is a single file without an index.
  const std::string& index_path() const { return index_path_; }
  // metadata.total_size of the index, when given (informational; not checked against the shards).
  std::optional<uint64_t> total_size() const { return total_size_; }
  // Sorted by file name.
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  // Every tensor, shard by shard, in offset order within a shard.
  const std::vector<Entry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

  const TensorInfo& info(const Entry& e) const { return shards_[e.shard].tensors()[e.tensor]; }
  const SafetensorsFile& shard_of(const Entry& e) const { return shards_[e.shard]; }
  const Entry* find(std::string_view name) const;
  // Throws "no tensor named 'X'" naming the checkpoint path.
  const Entry& at(std::string_view name) const;
  std::span<const uint8_t> data(const Entry& e) const { return shards_[e.shard].data(info(e)); }

 private:
  std::string path_;
  std::string index_path_;
  std::optional<uint64_t> total_size_;
  std::vector<SafetensorsFile> shards_;
  std::vector<Entry> entries_;
  NameIndex index_;  // name → position in entries_
};

// Collects tensors and writes one file as the reference writer does: header JSON padded with
// spaces so that 8 + n is a multiple of 8, `__metadata__` first, tensors laid out by descending
// dtype order (see Dtype) then by name.
class SafetensorsWriter {
 public:
  // Throws when the name is taken, reserved or not UTF-8, or bytes.size() != the shape's size.
  void add(std::string name, Dtype dtype, std::vector<uint64_t> shape, std::vector<uint8_t> bytes);
  void set_metadata(std::string key, std::string value);

  // Sum of the payload bytes added so far (an index's total_size).
  uint64_t payload_size() const { return payload_size_; }
  std::vector<uint8_t> serialize() const;
  void write(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    Dtype dtype;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> bytes;
  };
  // Hands the file to sink in order: length, header, payloads.
  void emit(const std::function<void(std::span<const uint8_t>)>& sink) const;

  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_;
  uint64_t payload_size_ = 0;
};

// Writes model.safetensors.index.json content: {"metadata": {"total_size": N}, "weight_map": {...}}.
void write_safetensors_index(const std::string& path, const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size);

}  // namespace k3
