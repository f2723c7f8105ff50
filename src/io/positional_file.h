// A new file of known size written piece by piece at any offsets: headers first, then payloads as
// they are produced (k3 quantize streams a checkpoint this way and never holds it whole). Bytes
// never written read as zero.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace k3 {

class PositionalFile {
 public:
  // Creates (or truncates) `path` and sizes it to `size` bytes. Throws k3::Error naming the path.
  PositionalFile(const std::string& path, uint64_t size);
  ~PositionalFile();  // closes without checking when close() was not called (an error path)
  PositionalFile(const PositionalFile&) = delete;
  PositionalFile& operator=(const PositionalFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Throws k3::Error naming the path when [offset, offset + bytes.size()) is outside the file or
  // the write fails.
  void write_at(uint64_t offset, std::span<const uint8_t> bytes);
  // Closes the file; throws when that fails.
  void close();

 private:
  std::string path_;
  uint64_t size_ = 0;
  int fd_ = -1;
};

}  // namespace k3
