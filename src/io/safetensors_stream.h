// A safetensors file written header first, for outputs too large to hold (k3 quantize): every
// tensor is declared (with SafetensorsWriter::add's checks), open() writes the header
// SafetensorsWriter would write for the same tensors (same layout, byte for byte), then payloads
// arrive in any order and in pieces, each written in place as it comes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "io/positional_file.h"
#include "io/safetensors.h"

namespace k3 {

class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter();
  ~SafetensorsStreamWriter();
  SafetensorsStreamWriter(SafetensorsStreamWriter&&) noexcept;
  SafetensorsStreamWriter& operator=(SafetensorsStreamWriter&&) noexcept;

  // Returns the tensor's index (declaration order). Throws as SafetensorsWriter::add does.
  size_t declare(std::string name, Dtype dtype, std::vector<uint64_t> shape);
  void set_metadata(std::string key, std::string value);
  uint64_t payload_size() const { return payload_size_; }
  uint64_t nbytes(size_t index) const { return tensors_.at(index).payload.nbytes; }
  const std::string& name(size_t index) const { return tensors_.at(index).name; }
  size_t size() const { return tensors_.size(); }

  // Creates the file at its final size and writes the header.
  void open(const std::string& path);
  // Writes `bytes` at `offset` inside tensor `index`'s payload; throws past its end.
  void write(size_t index, uint64_t offset, std::span<const uint8_t> bytes);
  // Throws naming the first tensor whose payload was not written whole (unless kHeadersOnly); then
  // closes the file.
  void close(PayloadPolicy policy = PayloadPolicy::kWhole);

 private:
  struct Declared {
    std::string name;
    Dtype dtype;
    std::vector<uint64_t> shape;
    PayloadExtent payload;
  };
  std::vector<Declared> tensors_;
  std::unordered_set<std::string> names_;
  std::map<std::string, std::string> metadata_;
  uint64_t payload_size_ = 0;
  std::unique_ptr<PositionalFile> file_;
};

}  // namespace k3
