#include "io/safetensors.h"

#include "io/safetensors_detail.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <thread>

namespace k3 {
namespace {

using safetensors_detail::require_text;
using safetensors_detail::shape_string;

using json = nlohmann::json;
namespace fs = std::filesystem;

struct DtypeDesc {
  std::string_view name;
  uint32_t bits;
};

// Indexed by Dtype.
constexpr std::array<DtypeDesc, kDtypeCount> kDtypes = {{
    {"BOOL", 8},         {"F4", 4},           {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},    {"I8", 8},
    {"F8_E5M2", 8},      {"F8_E4M3", 8},      {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},           {"F8_E5M2FNUZ", 8},
    {"I16", 16},         {"U16", 16},         {"F16", 16},    {"BF16", 16},   {"I32", 32},  {"U32", 32},
    {"F32", 32},         {"C64", 64},         {"F64", 64},    {"I64", 64},    {"U64", 64},
}};

constexpr std::string_view kIndexName = "model.safetensors.index.json";

std::string range_string(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// nlohmann reports how many bytes it read, counting the end of input; errors name the 0-based
// offset of the byte that failed, at most the text size.
std::string json_error(size_t position, size_t size) {
  return "invalid JSON near byte " + std::to_string(std::min(position == 0 ? 0 : position - 1, size));
}

// SAX handler for a safetensors header: builds tensor entries directly (no DOM), rejecting
// duplicate keys, which nlohmann's DOM parser would silently collapse.
class HeaderSax {
 public:
  struct Parsed {
    std::vector<TensorInfo> tensors;  // in header order; offset/nbytes unset
    std::vector<std::array<uint64_t, 2>> ranges;
    std::map<std::string, std::string> metadata;
    NameIndex index;
  };

  HeaderSax(const std::string& path, size_t size, Parsed& out) : path_(path), size_(size), out_(out) {}

  bool null() { return unexpected(); }
  bool boolean(bool) { return unexpected(); }
  bool number_integer(json::number_integer_t) { return unexpected(); }
  bool number_float(json::number_float_t, const std::string&) { return unexpected(); }
  bool binary(json::binary_t&) { return unexpected(); }

  bool number_unsigned(json::number_unsigned_t v) {
    if (ctx_ == Ctx::Shape) {
      out_.tensors.back().shape.push_back(v);
      return true;
    }
    if (ctx_ == Ctx::Offsets) {
      if (offsets_seen_ == 2) return unexpected();
      out_.ranges.back()[offsets_seen_++] = v;
      return true;
    }
    return unexpected();
  }

  bool string(std::string& s) {
    if (ctx_ == Ctx::Tensor && field_ == Field::Dtype) {
      out_.tensors.back().dtype = dtype_from_string(s, Where{path_, name_, "dtype"});
      return true;
    }
    if (ctx_ == Ctx::Metadata) {
      out_.metadata.insert_or_assign(std::move(name_), std::move(s));  // duplicates rejected in key()
      return true;
    }
    return unexpected();
  }

  bool start_object(size_t) {
    if (ctx_ == Ctx::Root) {
      ctx_ = Ctx::Top;
    } else if (ctx_ == Ctx::Top && in_metadata_key_) {
      ctx_ = Ctx::Metadata;
    } else if (ctx_ == Ctx::Top) {
      ctx_ = Ctx::Tensor;
      fields_seen_ = 0;
      out_.tensors.push_back(TensorInfo{name_, Dtype::U8, {}, 0, 0});
      out_.ranges.push_back({0, 0});
    } else {
      return unexpected();
    }
    return true;
  }

  bool key(std::string& k) {
    if (ctx_ == Ctx::Top) {
      in_metadata_key_ = k == "__metadata__";
      if (in_metadata_key_) {
        if (metadata_seen_) throw Error(Where{path_, "", "__metadata__"}, "key appears twice in the header");
        metadata_seen_ = true;
      } else if (!out_.index.try_emplace(k, static_cast<uint32_t>(out_.tensors.size())).second) {
        throw Error(Where{path_, k, ""}, "tensor appears twice in the header");
      }
      name_ = std::move(k);
    } else if (ctx_ == Ctx::Metadata) {
      if (out_.metadata.count(k)) throw Error(Where{path_, "", "__metadata__"}, "key '" + k + "' appears twice");
      name_ = std::move(k);
    } else {  // Ctx::Tensor
      const std::string& tensor = out_.tensors.back().name;
      if (k == "dtype") field_ = Field::Dtype;
      else if (k == "shape") field_ = Field::Shape;
      else if (k == "data_offsets") field_ = Field::Offsets;
      else throw Error(Where{path_, tensor, k}, "unknown field (expected dtype, shape, data_offsets)");
      const unsigned bit = 1u << static_cast<unsigned>(field_);
      if (fields_seen_ & bit) throw Error(Where{path_, tensor, k}, "field appears twice");
      fields_seen_ |= bit;
    }
    return true;
  }

  bool end_object() {
    if (ctx_ == Ctx::Tensor) {
      for (Field f : {Field::Dtype, Field::Shape, Field::Offsets})
        if (!(fields_seen_ & (1u << static_cast<unsigned>(f))))
          throw Error(Where{path_, out_.tensors.back().name, field_name(f)}, "missing field");
      ctx_ = Ctx::Top;
    } else if (ctx_ == Ctx::Metadata) {
      ctx_ = Ctx::Top;
    } else {
      ctx_ = Ctx::Done;
    }
    return true;
  }

  bool start_array(size_t) {
    if (ctx_ == Ctx::Tensor && field_ == Field::Shape) {
      ctx_ = Ctx::Shape;
    } else if (ctx_ == Ctx::Tensor && field_ == Field::Offsets) {
      ctx_ = Ctx::Offsets;
      offsets_seen_ = 0;
    } else {
      return unexpected();
    }
    return true;
  }

  bool end_array() {
    if (ctx_ == Ctx::Offsets && offsets_seen_ != 2) return unexpected();
    ctx_ = Ctx::Tensor;
    return true;
  }

  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception&) {
    throw Error(Where{path_, "", "header"}, json_error(position, size_));
  }

 private:
  enum class Ctx { Root, Top, Metadata, Tensor, Shape, Offsets, Done };
  enum class Field { Dtype, Shape, Offsets };

  static const char* field_name(Field f) {
    return f == Field::Dtype ? "dtype" : f == Field::Shape ? "shape" : "data_offsets";
  }

  // A value of the wrong JSON type for where the parser is; always throws.
  bool unexpected() const {
    switch (ctx_) {
      case Ctx::Root:
        throw Error(Where{path_, "", "header"}, "not a JSON object");
      case Ctx::Top:
        if (in_metadata_key_) throw Error(Where{path_, "", "__metadata__"}, "must be an object of strings");
        throw Error(Where{path_, name_, ""}, "must be an object with fields dtype, shape, data_offsets");
      case Ctx::Metadata:
        throw Error(Where{path_, "", "__metadata__"}, "value of key '" + name_ + "' must be a string");
      default:
        break;
    }
    const std::string& tensor = out_.tensors.back().name;
    switch (field_) {
      case Field::Dtype:
        throw Error(Where{path_, tensor, "dtype"}, "must be a string");
      case Field::Shape:
        throw Error(Where{path_, tensor, "shape"}, "must be an array of non-negative integers");
      case Field::Offsets:
        break;
    }
    throw Error(Where{path_, tensor, "data_offsets"}, "must be [begin, end], two non-negative integers");
  }

  const std::string& path_;
  const size_t size_;  // of the JSON text
  Parsed& out_;
  Ctx ctx_ = Ctx::Root;
  Field field_ = Field::Dtype;
  std::string name_;  // current top-level key, or current __metadata__ key
  bool in_metadata_key_ = false;
  bool metadata_seen_ = false;
  unsigned fields_seen_ = 0;
  int offsets_seen_ = 0;
};

// SAX handler for model.safetensors.index.json: collects weight_map (tensor → shard id, in file
// order) and metadata.total_size; other keys are skipped whatever they hold.
class IndexSax {
 public:
  struct Parsed {
    std::vector<std::string> shard_names;        // by shard id
    std::vector<std::pair<std::string, uint32_t>> listed;  // weight_map in file order
    NameIndex listed_index;                      // tensor → position in listed
    std::optional<uint64_t> total_size;
  };

  IndexSax(const std::string& path, size_t size, Parsed& out) : path_(path), size_(size), out_(out) {}

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
  bool number_integer(json::number_integer_t) { return scalar(); }
  bool number_float(json::number_float_t, const std::string&) { return scalar(); }
  bool binary(json::binary_t&) { return scalar(); }

  bool number_unsigned(json::number_unsigned_t v) {
    if (ctx_ == Ctx::Metadata && key_ == "total_size") {
      out_.total_size = v;
      return true;
    }
    return scalar();
  }

  bool string(std::string& s) {
    if (ctx_ != Ctx::WeightMap) return scalar();
    if (s.empty() || s.front() == '/')
      throw Error(Where{path_, key_, "weight_map"}, "shard file name '" + s + "' is not a relative path");
    auto [it, fresh] = shard_ids_.try_emplace(s, static_cast<uint32_t>(out_.shard_names.size()));
    if (fresh) out_.shard_names.push_back(std::move(s));
    out_.listed_index.emplace(key_, static_cast<uint32_t>(out_.listed.size()));
    out_.listed.emplace_back(std::move(key_), it->second);
    return true;
  }

  bool start_object(size_t) { return open(true); }
  bool start_array(size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& k) {
    if (ctx_ == Ctx::Top) {
      if ((k == "metadata" || k == "weight_map") && !top_keys_.insert(k).second)
        throw Error(Where{path_, "", k}, "key appears twice");
    } else if (ctx_ == Ctx::Metadata) {
      if (k == "total_size" && seen_total_size_) throw Error(Where{path_, "", "metadata.total_size"}, "key appears twice");
      seen_total_size_ |= k == "total_size";
    } else if (ctx_ == Ctx::WeightMap) {
      if (out_.listed_index.count(k)) throw Error(Where{path_, k, "weight_map"}, "tensor listed twice");
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception&) {
    throw Error(Where{path_, "", ""}, json_error(position, size_));
  }

  void finish() const {
    if (!top_keys_.count("weight_map")) throw Error(Where{path_, "", "weight_map"}, "missing field");
  }

 private:
  enum class Ctx { Root, Top, Metadata, WeightMap, Skip, Done };

  // A scalar value: fine in a skipped or ignored place, an error where a specific type is due.
  bool scalar() const {
    if (ctx_ == Ctx::Skip || (ctx_ == Ctx::Top && key_ != "metadata" && key_ != "weight_map") ||
        (ctx_ == Ctx::Metadata && key_ != "total_size"))
      return true;
    return wrong_type();
  }

  bool open(bool object) {
    if (ctx_ == Ctx::Skip) {
      ++skip_depth_;
    } else if (ctx_ == Ctx::Root) {
      if (!object) return wrong_type();
      ctx_ = Ctx::Top;
    } else if (ctx_ == Ctx::Top && (key_ == "metadata" || key_ == "weight_map")) {
      if (!object) return wrong_type();
      ctx_ = key_ == "metadata" ? Ctx::Metadata : Ctx::WeightMap;
    } else if (ctx_ == Ctx::WeightMap || (ctx_ == Ctx::Metadata && key_ == "total_size")) {
      return wrong_type();
    } else {
      skip_return_ = ctx_;
      ctx_ = Ctx::Skip;
      skip_depth_ = 1;
    }
    return true;
  }

  bool close() {
    if (ctx_ == Ctx::Skip) {
      if (--skip_depth_ == 0) ctx_ = skip_return_;
    } else {
      ctx_ = ctx_ == Ctx::Top ? Ctx::Done : Ctx::Top;
    }
    return true;
  }

  bool wrong_type() const {
    switch (ctx_) {
      case Ctx::Root:
        throw Error(Where{path_, "", ""}, "not a JSON object");
      case Ctx::Top:
        if (key_ == "metadata") throw Error(Where{path_, "", "metadata"}, "must be an object");
        throw Error(Where{path_, "", "weight_map"}, "must be an object mapping tensor names to shard file names");
      case Ctx::Metadata:
        throw Error(Where{path_, "", "metadata.total_size"}, "must be a non-negative integer");
      default:
        throw Error(Where{path_, key_, "weight_map"}, "shard file name must be a string");
    }
  }

  const std::string& path_;
  const size_t size_;  // of the JSON text
  Parsed& out_;
  Ctx ctx_ = Ctx::Root;
  Ctx skip_return_ = Ctx::Top;
  int skip_depth_ = 0;
  std::string key_;
  std::unordered_map<std::string, uint32_t> shard_ids_;
  std::set<std::string> top_keys_;
  bool seen_total_size_ = false;
};

void require_header_fits(uint64_t n, uint64_t file_size, const std::string& path) {
  if (!range_fits(8, n, file_size))
    throw Error(Where{path, "", "header_len"}, "header length " + std::to_string(n) +
                                                   " runs past the end of the file (" + std::to_string(file_size) +
                                                   " bytes)");
}

template <class Sax>
void sax_parse_bytes(std::span<const uint8_t> text, Sax& sax) {
  json::sax_parse(text.data(), text.data() + text.size(), &sax, nlohmann::detail::input_format_t::json,
                  /*strict=*/true, /*ignore_comments=*/false);
}

// Runs fn(i) for i in [0, n) on up to `threads` threads; rethrows the exception of the lowest
// failing i, so that the reported error does not depend on scheduling.
template <class Fn>
void parallel_for(size_t n, size_t threads, Fn fn) {
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  threads = std::min(threads, n);
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

// ---- dtypes -------------------------------------------------------------------------------

Dtype dtype_from_string(std::string_view name, const Where& where) {
  for (int i = 0; i < kDtypeCount; ++i)
    if (kDtypes[i].name == name) return static_cast<Dtype>(i);
  throw Error(where, "unknown dtype '" + std::string(name) + "'");
}

std::string_view dtype_name(Dtype dtype) { return kDtypes[static_cast<int>(dtype)].name; }

uint32_t dtype_bits(Dtype dtype) { return kDtypes[static_cast<int>(dtype)].bits; }

uint64_t dtype_size_bytes(Dtype dtype) {
  uint32_t bits = dtype_bits(dtype);
  if (bits % 8 != 0)
    throw Error("dtype " + std::string(dtype_name(dtype)) + " is " + std::to_string(bits) +
                " bits wide and has no whole-byte element size");
  return bits / 8;
}

uint64_t tensor_nbytes(Dtype dtype, std::span<const uint64_t> shape, const Where& where) {
  uint64_t numel = 1;
  for (uint64_t d : shape)
    if (__builtin_mul_overflow(numel, d, &numel))
      throw Error(where, "element count of shape " + shape_string(shape) + " overflows 64 bits");
  uint64_t bits;
  if (__builtin_mul_overflow(numel, uint64_t{dtype_bits(dtype)}, &bits))
    throw Error(where, "byte size of shape " + shape_string(shape) + " of " + std::string(dtype_name(dtype)) +
                           " overflows 64 bits");
  if (bits % 8 != 0)
    throw Error(where, std::to_string(numel) + " elements of " + std::string(dtype_name(dtype)) +
                           " do not fill a whole number of bytes");
  return bits / 8;
}

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

// ---- header parsing -----------------------------------------------------------------------

uint64_t safetensors_header_len(std::span<const uint8_t> prefix, uint64_t file_size, const std::string& path) {
  const Where where{path, "", "header_len"};
  if (prefix.size() < 8)
    throw Error(where, "file has " + std::to_string(file_size) + " bytes, fewer than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > kSafetensorsMaxHeader)
    throw Error(where, "header length " + std::to_string(n) + " exceeds the limit of " +
                           std::to_string(kSafetensorsMaxHeader) + " bytes");
  require_header_fits(n, file_size, path);
  return n;
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> text, uint64_t file_size,
                                           const std::string& path) {
  const uint64_t n = text.size();
  require_header_fits(n, file_size, path);
  require_text(text, Where{path, "", "header"}, "header");

  HeaderSax::Parsed parsed;
  HeaderSax sax(path, text.size(), parsed);
  sax_parse_bytes(text, sax);

  // Validate in offset order, as the reference does.
  std::vector<uint32_t> order(parsed.tensors.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return parsed.ranges[a] < parsed.ranges[b]; });

  SafetensorsHeader out;
  out.header_len = n;
  out.tensors.reserve(order.size());
  std::vector<uint32_t> rank(order.size());
  const uint64_t buffer_size = file_size - 8 - n;
  uint64_t pos = 0;
  for (uint32_t i : order) {
    TensorInfo& t = parsed.tensors[i];
    const auto [begin, end] = parsed.ranges[i];
    const Where where{path, t.name, "data_offsets"};
    if (end < begin) throw Error(where, "data_offsets " + range_string(begin, end) + " end before they begin");
    if (begin > pos)
      throw Error(where, "data_offsets " + range_string(begin, end) + " leave a gap: expected begin " +
                             std::to_string(pos));
    if (begin < pos)
      throw Error(where, "data_offsets " + range_string(begin, end) + " overlap tensor '" + out.tensors.back().name +
                             "': expected begin " + std::to_string(pos));
    const uint64_t nbytes = tensor_nbytes(t.dtype, t.shape, Where{path, t.name, "shape"});
    if (end - begin != nbytes)
      throw Error(where, "data_offsets " + range_string(begin, end) + " hold " + std::to_string(end - begin) +
                             " bytes but shape " + shape_string(t.shape) + " of " +
                             std::string(dtype_name(t.dtype)) + " needs " + std::to_string(nbytes));
    if (end > buffer_size)
      throw Error(where, "data_offsets end " + std::to_string(end) + " is past the end of the " +
                             std::to_string(buffer_size) + "-byte data buffer (truncated file?)");
    pos = end;
    t.offset = 8 + n + begin;
    t.nbytes = nbytes;
    rank[i] = static_cast<uint32_t>(out.tensors.size());
    out.tensors.push_back(std::move(t));
  }
  if (pos != buffer_size)
    throw Error(Where{path, "", "data_offsets"}, "tensors cover " + std::to_string(pos) + " bytes but the data buffer has " +
                                                     std::to_string(buffer_size) + " (trailing bytes)");
  for (auto& entry : parsed.index) entry.second = rank[entry.second];
  out.index = std::move(parsed.index);
  out.metadata = std::move(parsed.metadata);
  return out;
}

SafetensorsHeader parse_safetensors_buffer(std::span<const uint8_t> file, const std::string& path) {
  const uint64_t n = safetensors_header_len(file.first(std::min<size_t>(8, file.size())), file.size(), path);
  return parse_safetensors_header(file.subspan(8, n), file.size(), path);
}

// ---- SafetensorsFile ----------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<File> file = File::open(path);
  uint8_t prefix[8];
  const size_t got = static_cast<size_t>(std::min<uint64_t>(8, file->size()));
  file->read_at(0, prefix, got, "header_len");
  const uint64_t n = safetensors_header_len({prefix, got}, file->size(), path);
  std::vector<uint8_t> text = file->read_range(8, n, "header");
  SafetensorsHeader header = parse_safetensors_header(text, file->size(), path);
  return SafetensorsFile(std::move(file), std::move(header));
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = header_.index.find(name);
  return it == header_.index.end() ? nullptr : &header_.tensors[it->second];
}

const TensorInfo& SafetensorsFile::at(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  throw Error(Where{path(), std::string(name), ""}, "no such tensor");
}

std::span<const uint8_t> SafetensorsFile::data(const TensorInfo& info) const {
  return file_->view(info.offset, info.nbytes);
}

// ---- SafetensorsCheckpoint ----------------------------------------------------------------

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
  SafetensorsCheckpoint ck;
  ck.path_ = path;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw Error(Where{path, "", ""}, "no such file or directory");

  std::string single;
  if (fs::is_directory(st)) {
    const fs::path dir(path);
    if (fs::exists(dir / kIndexName)) {
      ck.index_path_ = (dir / kIndexName).string();
    } else if (fs::exists(fs::symlink_status(dir / "model.safetensors", ec))) {  // opening refuses a non-file
      single = (dir / "model.safetensors").string();
    } else {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".safetensors") found.push_back(e.path().string());
      if (found.empty())
        throw Error(Where{path, "", ""}, "no " + std::string(kIndexName) + " and no *.safetensors file");
      if (found.size() > 1)
        throw Error(Where{path, "", ""}, std::to_string(found.size()) + " *.safetensors files but no " +
                                             std::string(kIndexName) + " to tie them together");
      single = found.front();
    }
  } else if (path.ends_with(".index.json")) {
    ck.index_path_ = path;
  } else {
    single = path;
  }

  if (!single.empty()) {
    ck.shards_.push_back(SafetensorsFile::open(single));
    const auto& tensors = ck.shards_.front().tensors();
    ck.entries_.reserve(tensors.size());
    for (uint32_t t = 0; t < tensors.size(); ++t) {
      ck.index_.emplace(tensors[t].name, t);
      ck.entries_.push_back({0, t});
    }
    return ck;
  }

  // Sharded: parse the index, then open every shard's header.
  const std::string& index_path = ck.index_path_;
  const std::string index_name = fs::path(index_path).filename().string();
  IndexSax::Parsed idx;
  {
    std::shared_ptr<File> file = File::open(index_path);
    std::vector<uint8_t> text = file->read_range(0, file->size(), "");
    require_text(text, Where{index_path, "", ""}, "index");
    IndexSax sax(index_path, text.size(), idx);
    sax_parse_bytes(text, sax);
    sax.finish();
  }
  ck.total_size_ = idx.total_size;

  // Shards in file-name order; remap the ids the index assigned in first-use order.
  const size_t nshards = idx.shard_names.size();
  std::vector<uint32_t> by_name(nshards);
  std::iota(by_name.begin(), by_name.end(), 0u);
  std::sort(by_name.begin(), by_name.end(),
            [&](uint32_t a, uint32_t b) { return idx.shard_names[a] < idx.shard_names[b]; });
  std::vector<uint32_t> id_to_pos(nshards);
  for (uint32_t p = 0; p < nshards; ++p) id_to_pos[by_name[p]] = p;
  for (auto& entry : idx.listed) entry.second = id_to_pos[entry.second];

  const fs::path dir = fs::path(index_path).parent_path();
  std::vector<std::string> shard_paths(nshards);
  std::vector<const std::string*> first_key(nshards, nullptr);  // a weight_map key naming each shard
  for (const auto& [tensor, shard] : idx.listed) {
    if (first_key[shard] == nullptr) first_key[shard] = &tensor;
  }
  for (uint32_t p = 0; p < nshards; ++p) {
    shard_paths[p] = path_inside(dir.string(), idx.shard_names[by_name[p]], Where{index_path, *first_key[p], "weight_map"});
  }

  for (uint32_t p = 0; p < nshards; ++p) {
    if (fs::exists(shard_paths[p])) continue;
    const std::string* first = nullptr;
    size_t users = 0;
    for (const auto& [name, shard] : idx.listed)
      if (shard == p && users++ == 0) first = &name;
    throw Error(Where{shard_paths[p], "", ""},
                "shard is missing; " + index_name + " lists it for tensor '" + *first + "'" +
                    (users > 1 ? " and " + std::to_string(users - 1) + " more" : ""));
  }

  std::vector<std::optional<SafetensorsFile>> opened(nshards);
  parallel_for(nshards, std::max(16u, std::thread::hardware_concurrency()),
               [&](size_t p) { opened[p] = SafetensorsFile::open(shard_paths[p]); });
  ck.shards_.reserve(nshards);
  for (auto& f : opened) ck.shards_.push_back(std::move(*f));

  ck.entries_.reserve(idx.listed.size());
  ck.index_.reserve(idx.listed.size());
  for (uint32_t s = 0; s < nshards; ++s) {
    const auto& tensors = ck.shards_[s].tensors();
    for (uint32_t t = 0; t < tensors.size(); ++t) {
      const std::string& name = tensors[t].name;
      const Where where{shard_paths[s], name, ""};
      auto it = idx.listed_index.find(name);
      if (it == idx.listed_index.end()) throw Error(where, "tensor is not listed in " + index_name);
      const uint32_t listed_shard = idx.listed[it->second].second;
      if (listed_shard != s) {
        const std::string& other = idx.shard_names[by_name[listed_shard]];
        if (ck.shards_[listed_shard].find(name))
          throw Error(where, "tensor is also present in shard '" + other + "' (the one " + index_name + " names)");
        throw Error(where, index_name + " lists the tensor in shard '" + other + "'");
      }
      ck.index_.emplace(name, static_cast<uint32_t>(ck.entries_.size()));
      ck.entries_.push_back({s, t});
    }
  }
  if (ck.entries_.size() != idx.listed.size()) {
    for (const auto& [name, shard] : idx.listed)
      if (!ck.index_.count(name))
        throw Error(Where{shard_paths[shard], name, ""}, "tensor listed in " + index_name + " is missing from this shard");
  }
  return ck;
}

const SafetensorsCheckpoint::Entry* SafetensorsCheckpoint::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const SafetensorsCheckpoint::Entry& SafetensorsCheckpoint::at(std::string_view name) const {
  if (const Entry* e = find(name)) return *e;
  throw Error(Where{path_, std::string(name), ""}, "no such tensor");
}

}  // namespace k3
