// GGUF writers (gguf.h): GgufWriter builds a file in memory, GgufStreamWriter writes the same
// bytes header first and payloads in place as they come.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_detail.h"

namespace k3 {
namespace {

using gguf_detail::kAlignmentKey;
using gguf_detail::kMagic;
using gguf_detail::kMaxDims;

class Bytes {
 public:
  template <class T>
  void put(T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) { out.resize((out.size() + alignment - 1) / alignment * alignment, 0); }

  // Writes the value without its type id; `key` names errors.
  void put_value(const GgufValue& value, const std::string& key) {
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::string>) {
            put_string(v);
          } else if constexpr (std::is_same_v<V, GgufArray>) {
            put_array(v, key);
          } else if constexpr (std::is_same_v<V, bool>) {
            put<uint8_t>(v ? 1 : 0);
          } else {
            put<V>(v);
          }
        },
        value.value);
  }

  void put_array(const GgufArray& a, const std::string& key) {
    const uint64_t size = gguf_packed_size(a.elem_type);
    const uint64_t held = size != 0 ? a.packed.size() / size
                          : a.elem_type == GgufType::STRING ? a.string_ends.size() : a.arrays.size();
    if (held != a.count || (size != 0 && a.packed.size() % size != 0)) {
      throw Error(Where{"", "", key}, "array of " + std::string(gguf_type_name(a.elem_type)) + " holds " + std::to_string(held) +
                                          " elements but says " + std::to_string(a.count));
    }
    put<uint32_t>(static_cast<uint32_t>(a.elem_type));
    put<uint64_t>(a.count);
    if (size != 0) {
      out.insert(out.end(), a.packed.begin(), a.packed.end());
    } else if (a.elem_type == GgufType::STRING) {
      for (uint64_t i = 0; i < a.count; ++i) {
        const std::string_view s = a.string_at(i);
        put<uint64_t>(s.size());
        out.insert(out.end(), s.begin(), s.end());
      }
    } else {
      for (const GgufArray& sub : a.arrays) put_array(sub, key);
    }
  }

  std::vector<uint8_t> out;
};

// One tensor as the header describes it.
struct TensorHeader {
  const std::string* name;
  GgmlType type;
  const std::vector<uint64_t>* ne;
  uint64_t nbytes;
};

uint64_t padded(uint64_t n, uint64_t align) { return (n + align - 1) / align * align; }

// The payload size of a tensor of `type` and `ne`; throws naming the tensor for a bad shape.
uint64_t checked_nbytes(const std::string& name, GgmlType type, const std::vector<uint64_t>& ne) {
  const Where where{"", name, ""};
  if (ne.empty() || ne.size() > kMaxDims) throw Error(where, "needs 1 to 4 dimensions, got " + std::to_string(ne.size()));
  uint64_t nbytes = ggml_row_size(type, ne[0], Where{"", name, "ne[0]"});
  for (size_t d = 1; d < ne.size(); ++d) nbytes *= ne[d];
  return nbytes;
}

void add_metadata(std::vector<GgufKeyValue>& metadata, const std::string& key, GgufValue value) {
  for (const GgufKeyValue& kv : metadata) {
    if (kv.key == key) throw Error(Where{"", "", key}, "duplicate metadata key");
  }
  metadata.push_back({key, std::move(value)});
}

uint64_t alignment_of(const std::vector<GgufKeyValue>& metadata) {
  for (const GgufKeyValue& kv : metadata) {
    if (kv.key != kAlignmentKey) continue;
    if (kv.value.type() != GgufType::U32 || kv.value.get<uint32_t>() == 0 || kv.value.get<uint32_t>() % 8 != 0) {
      throw Error(Where{"", "", kAlignmentKey}, "must be a u32 nonzero multiple of 8");
    }
    return kv.value.get<uint32_t>();
  }
  return GgufFile::kDefaultAlignment;
}

// Everything before the data section, padded to the alignment; tensors' data follow in order,
// each padded to the alignment.
std::vector<uint8_t> header_bytes(uint32_t version, const std::vector<GgufKeyValue>& metadata,
                                  const std::vector<TensorHeader>& tensors, uint64_t align) {
  Bytes b;
  b.put<uint32_t>(kMagic);
  b.put<uint32_t>(version);
  b.put<uint64_t>(tensors.size());
  b.put<uint64_t>(metadata.size());
  for (const GgufKeyValue& kv : metadata) {
    b.put_string(kv.key);
    b.put<uint32_t>(static_cast<uint32_t>(kv.value.type()));
    b.put_value(kv.value, kv.key);
  }
  uint64_t offset = 0;
  for (const TensorHeader& t : tensors) {
    b.put_string(*t.name);
    b.put<uint32_t>(static_cast<uint32_t>(t.ne->size()));
    for (uint64_t n : *t.ne) b.put<uint64_t>(n);
    b.put<uint32_t>(static_cast<uint32_t>(t.type));
    b.put<uint64_t>(offset);
    offset += padded(t.nbytes, align);
  }
  b.pad_to(align);
  return std::move(b.out);
}

}  // namespace

// ---- GgufWriter ---------------------------------------------------------------------------

void GgufWriter::set(const std::string& key, GgufValue value) { add_metadata(metadata_, key, std::move(value)); }

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne,
                            std::span<const uint8_t> data) {
  const Where where{"", name, ""};
  for (const Tensor& t : tensors_) {
    if (t.name == name) throw Error(where, "duplicate tensor name");
  }
  const uint64_t nbytes = checked_nbytes(name, type, ne);
  if (nbytes != data.size()) {
    throw Error(where, "data has " + std::to_string(data.size()) + " bytes, the shape needs " + std::to_string(nbytes));
  }
  tensors_.push_back({name, type, std::move(ne), std::vector<uint8_t>(data.begin(), data.end())});
}

uint64_t GgufWriter::alignment() const { return alignment_of(metadata_); }

std::vector<uint8_t> GgufWriter::to_bytes() const {
  const uint64_t align = alignment();
  std::vector<TensorHeader> headers;
  for (const Tensor& t : tensors_) headers.push_back({&t.name, t.type, &t.ne, t.data.size()});
  std::vector<uint8_t> out = header_bytes(version_, metadata_, headers, align);
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize(padded(out.size(), align), 0);
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw Error(Where{path, "", ""}, std::string("cannot create: ") + std::strerror(errno));
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (written != bytes.size() || !closed) throw Error(Where{path, "", ""}, "write failed");
}

// ---- GgufStreamWriter ---------------------------------------------------------------------

GgufStreamWriter::GgufStreamWriter(uint32_t version) : version_(version) {}
GgufStreamWriter::~GgufStreamWriter() = default;
GgufStreamWriter::GgufStreamWriter(GgufStreamWriter&&) noexcept = default;
GgufStreamWriter& GgufStreamWriter::operator=(GgufStreamWriter&&) noexcept = default;

void GgufStreamWriter::set(const std::string& key, GgufValue value) {
  if (file_) throw Error(Where{"", "", key}, "metadata set after the file was opened");
  add_metadata(metadata_, key, std::move(value));
}

size_t GgufStreamWriter::declare(std::string name, GgmlType type, std::vector<uint64_t> ne) {
  if (file_) throw Error(Where{"", name, ""}, "declared after the file was opened");
  const uint64_t nbytes = checked_nbytes(name, type, ne);
  if (!names_.insert(name).second) throw Error(Where{"", name, ""}, "duplicate tensor name");
  tensors_.push_back(Declared{std::move(name), type, std::move(ne), PayloadExtent{nbytes}});
  return tensors_.size() - 1;
}

uint64_t GgufStreamWriter::file_size() const {
  const uint64_t align = alignment_of(metadata_);
  std::vector<TensorHeader> headers;
  for (const Declared& t : tensors_) headers.push_back({&t.name, t.type, &t.ne, t.payload.nbytes});
  uint64_t size = header_bytes(version_, metadata_, headers, align).size();
  for (const Declared& t : tensors_) size += padded(t.payload.nbytes, align);
  return size;
}

void GgufStreamWriter::open(const std::string& path) {
  const uint64_t align = alignment_of(metadata_);
  std::vector<TensorHeader> headers;
  for (const Declared& t : tensors_) headers.push_back({&t.name, t.type, &t.ne, t.payload.nbytes});
  const std::vector<uint8_t> header = header_bytes(version_, metadata_, headers, align);
  uint64_t pos = header.size();
  for (Declared& t : tensors_) {
    t.payload.offset = pos;
    pos += padded(t.payload.nbytes, align);
  }
  file_ = std::make_unique<PositionalFile>(path, pos);
  file_->write_at(0, header);
}

void GgufStreamWriter::write(size_t index, uint64_t offset, std::span<const uint8_t> bytes) {
  Declared& t = tensors_.at(index);
  write_payload(file_.get(), t.name, t.payload, offset, bytes);
}

void GgufStreamWriter::close(PayloadPolicy policy) {
  if (!file_) throw Error(Where{"", "", ""}, "closed before the file was opened");
  if (policy == PayloadPolicy::kWhole) {
    for (const Declared& t : tensors_) expect_whole_payload(*file_, t.name, t.payload);
  }
  file_->close();
}

}  // namespace k3
