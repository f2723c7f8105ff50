// SafetensorsWriter, SafetensorsStreamWriter and the shard index writer (safetensors.h, safetensors_stream.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/safetensors_detail.h"
#include "io/safetensors_stream.h"

namespace k3 {
namespace {

using json = nlohmann::json;
using safetensors_detail::require_text;
using safetensors_detail::shape_string;

// Writes a file from chunks handed over one at a time.
class FileSink {
 public:
  explicit FileSink(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  ~FileSink() {
    if (fd_ >= 0) ::close(fd_);
  }
  void operator()(std::span<const uint8_t> chunk) {
    const uint8_t* p = chunk.data();
    size_t left = chunk.size();
    while (left > 0) {
      ssize_t put = ::write(fd_, p, left);
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) fail("write failed");
      p += put;
      left -= static_cast<size_t>(put);
    }
  }
  void close() {
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("write failed");
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw Error(Where{path_, "", ""}, std::string(what) + ": " + std::strerror(errno));
  }
  std::string path_;
  int fd_ = -1;
};


std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

namespace {

// The checks of SafetensorsWriter::add: a UTF-8 name that is not reserved; returns the payload size.
uint64_t checked_nbytes(const std::string& name, Dtype dtype, const std::vector<uint64_t>& shape) {
  const Where where{"", name, ""};
  require_text(as_bytes(name), where, "tensor name");
  if (name == "__metadata__") throw Error(where, "reserved name");
  return tensor_nbytes(dtype, shape, Where{"", name, "shape"});
}

// One tensor as the header describes it.
struct HeaderEntry {
  const std::string* name;
  Dtype dtype;
  const std::vector<uint64_t>* shape;
  uint64_t nbytes;
};

// The reference writer's payload order: descending dtype (see Dtype), then name.
std::vector<size_t> layout_order(const std::vector<HeaderEntry>& entries) {
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (entries[a].dtype != entries[b].dtype) return entries[a].dtype > entries[b].dtype;
    return *entries[a].name < *entries[b].name;
  });
  return order;
}

// The header JSON padded with spaces so that 8 + n is a multiple of 8; offsets follow `order`.
std::string header_json(const std::map<std::string, std::string>& metadata, const std::vector<HeaderEntry>& entries,
                        const std::vector<size_t>& order) {
  auto quote = [](const std::string& s) { return json(s).dump(); };
  std::string out = "{";
  if (!metadata.empty()) {
    out += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) out += ',';
      out += quote(k) + ":" + quote(v);
      first = false;
    }
    out += "}";
  }
  uint64_t pos = 0;
  for (size_t i : order) {
    const HeaderEntry& e = entries[i];
    if (out.size() > 1) out += ",";
    out += quote(*e.name) + ":{\"dtype\":\"" + std::string(dtype_name(e.dtype)) + "\",\"shape\":[";
    for (size_t d = 0; d < e.shape->size(); ++d) {
      if (d) out += ',';
      out += std::to_string((*e.shape)[d]);
    }
    out += "],\"data_offsets\":[" + std::to_string(pos) + "," + std::to_string(pos + e.nbytes) + "]}";
    pos += e.nbytes;
  }
  out += "}";
  out.append((8 - out.size() % 8) % 8, ' ');
  return out;
}

// The 8-byte little-endian length prefix followed by the header.
std::vector<uint8_t> header_bytes(const std::string& header) {
  std::vector<uint8_t> out(8 + header.size());
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

void check_metadata(const std::string& key, const std::string& value) {
  require_text(as_bytes(key), Where{"", "", "__metadata__"}, "key");
  require_text(as_bytes(value), Where{"", "", "__metadata__"}, "value of key '" + key + "'");
}

}  // namespace

void SafetensorsWriter::add(std::string name, Dtype dtype, std::vector<uint64_t> shape, std::vector<uint8_t> bytes) {
  const uint64_t nbytes = checked_nbytes(name, dtype, shape);
  for (const Pending& p : tensors_)
    if (p.name == name) throw Error(Where{"", name, ""}, "tensor added twice");
  if (bytes.size() != nbytes)
    throw Error(Where{"", name, ""}, "got " + std::to_string(bytes.size()) + " bytes but shape " + shape_string(shape) + " of " +
                                         std::string(dtype_name(dtype)) + " needs " + std::to_string(nbytes));
  payload_size_ += nbytes;
  tensors_.push_back(Pending{std::move(name), dtype, std::move(shape), std::move(bytes)});
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  check_metadata(key, value);
  metadata_.insert_or_assign(std::move(key), std::move(value));
}

void SafetensorsWriter::emit(const std::function<void(std::span<const uint8_t>)>& sink) const {
  std::vector<HeaderEntry> entries;
  for (const Pending& p : tensors_) entries.push_back({&p.name, p.dtype, &p.shape, p.bytes.size()});
  const std::vector<size_t> order = layout_order(entries);
  sink(header_bytes(header_json(metadata_, entries, order)));
  for (size_t i : order) sink(tensors_[i].bytes);
}

std::vector<uint8_t> SafetensorsWriter::serialize() const {
  std::vector<uint8_t> out;
  emit([&out](std::span<const uint8_t> chunk) { out.insert(out.end(), chunk.begin(), chunk.end()); });
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  FileSink sink(path);
  emit(std::ref(sink));
  sink.close();
}

// ---- SafetensorsStreamWriter -------------------------------------------------------------

SafetensorsStreamWriter::SafetensorsStreamWriter() = default;
SafetensorsStreamWriter::~SafetensorsStreamWriter() = default;
SafetensorsStreamWriter::SafetensorsStreamWriter(SafetensorsStreamWriter&&) noexcept = default;
SafetensorsStreamWriter& SafetensorsStreamWriter::operator=(SafetensorsStreamWriter&&) noexcept = default;

size_t SafetensorsStreamWriter::declare(std::string name, Dtype dtype, std::vector<uint64_t> shape) {
  if (file_) throw Error(Where{"", name, ""}, "declared after the file was opened");
  const uint64_t nbytes = checked_nbytes(name, dtype, shape);
  if (!names_.insert(name).second) throw Error(Where{"", name, ""}, "tensor added twice");
  payload_size_ += nbytes;
  tensors_.push_back(Declared{std::move(name), dtype, std::move(shape), PayloadExtent{nbytes}});
  return tensors_.size() - 1;
}

void SafetensorsStreamWriter::set_metadata(std::string key, std::string value) {
  check_metadata(key, value);
  metadata_.insert_or_assign(std::move(key), std::move(value));
}

void SafetensorsStreamWriter::open(const std::string& path) {
  std::vector<HeaderEntry> entries;
  for (const Declared& t : tensors_) entries.push_back({&t.name, t.dtype, &t.shape, t.payload.nbytes});
  const std::vector<size_t> order = layout_order(entries);
  const std::vector<uint8_t> header = header_bytes(header_json(metadata_, entries, order));
  uint64_t pos = header.size();
  for (size_t i : order) {
    tensors_[i].payload.offset = pos;
    pos += tensors_[i].payload.nbytes;
  }
  file_ = std::make_unique<PositionalFile>(path, pos);
  file_->write_at(0, header);
}

void SafetensorsStreamWriter::write(size_t index, uint64_t offset, std::span<const uint8_t> bytes) {
  Declared& t = tensors_.at(index);
  write_payload(file_.get(), t.name, t.payload, offset, bytes);
}

void SafetensorsStreamWriter::close(PayloadPolicy policy) {
  if (!file_) throw Error(Where{"", "", ""}, "closed before the file was opened");
  if (policy == PayloadPolicy::kWhole) {
    for (const Declared& t : tensors_) expect_whole_payload(*file_, t.name, t.payload);
  }
  file_->close();
}

void write_safetensors_index(const std::string& path, const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size) {
  json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  FileSink sink(path);
  sink(as_bytes(text));
  sink.close();
}

}  // namespace k3
