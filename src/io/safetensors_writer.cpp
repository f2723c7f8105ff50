// SafetensorsWriter and the shard index writer (safetensors.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/safetensors_detail.h"

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

void SafetensorsWriter::add(std::string name, Dtype dtype, std::vector<uint64_t> shape, std::vector<uint8_t> bytes) {
  const Where where{"", name, ""};
  require_text(as_bytes(name), where, "tensor name");
  if (name == "__metadata__") throw Error(where, "reserved name");
  for (const Pending& p : tensors_)
    if (p.name == name) throw Error(where, "tensor added twice");
  const uint64_t nbytes = tensor_nbytes(dtype, shape, Where{"", name, "shape"});
  if (bytes.size() != nbytes)
    throw Error(where, "got " + std::to_string(bytes.size()) + " bytes but shape " + shape_string(shape) + " of " +
                           std::string(dtype_name(dtype)) + " needs " + std::to_string(nbytes));
  payload_size_ += nbytes;
  tensors_.push_back(Pending{std::move(name), dtype, std::move(shape), std::move(bytes)});
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  require_text(as_bytes(key), Where{"", "", "__metadata__"}, "key");
  require_text(as_bytes(value), Where{"", "", "__metadata__"}, "value of key '" + key + "'");
  metadata_.insert_or_assign(std::move(key), std::move(value));
}

std::string SafetensorsWriter::header_json(const std::vector<const Pending*>& order) const {
  auto quote = [](const std::string& s) { return json(s).dump(); };
  std::string out = "{";
  if (!metadata_.empty()) {
    out += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata_) {
      if (!first) out += ',';
      out += quote(k) + ":" + quote(v);
      first = false;
    }
    out += "}";
  }
  uint64_t pos = 0;
  for (const Pending* p : order) {
    if (out.size() > 1) out += ",";
    out += quote(p->name) + ":{\"dtype\":\"" + std::string(dtype_name(p->dtype)) + "\",\"shape\":[";
    for (size_t i = 0; i < p->shape.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(p->shape[i]);
    }
    out += "],\"data_offsets\":[" + std::to_string(pos) + "," + std::to_string(pos + p->bytes.size()) + "]}";
    pos += p->bytes.size();
  }
  out += "}";
  out.append((8 - out.size() % 8) % 8, ' ');  // 8 + n stays a multiple of 8
  return out;
}

void SafetensorsWriter::emit(const std::function<void(std::span<const uint8_t>)>& sink) const {
  std::vector<const Pending*> order;
  for (const Pending& p : tensors_) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const Pending* a, const Pending* b) {
    if (a->dtype != b->dtype) return a->dtype > b->dtype;
    return a->name < b->name;
  });
  const std::string header = header_json(order);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  sink({len, 8});
  sink(as_bytes(header));
  for (const Pending* p : order) sink(p->bytes);
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

void write_safetensors_index(const std::string& path, const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size) {
  json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(2) + "\n";
  FileSink sink(path);
  sink(as_bytes(text));
  sink.close();
}

}  // namespace k3
