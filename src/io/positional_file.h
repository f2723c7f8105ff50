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

// One tensor's payload in a streamed file: where it starts and how much of it was written. The
// streamed writers (safetensors, GGUF) write payloads piecewise through write_payload and check on
// close that each is whole.
struct PayloadExtent {
  uint64_t nbytes = 0;
  uint64_t offset = 0;   // absolute file offset, set when the file is opened
  uint64_t written = 0;  // payload bytes written so far
};

// What closing a streamed file checks: every payload written whole (a real checkpoint), or nothing
// (a header-only checkpoint whose payloads stay holes that read as zero, for planning at real sizes).
enum class PayloadPolicy { kWhole, kHeadersOnly };

// Writes `bytes` at `offset` inside `tensor`'s payload; throws k3::Error naming the tensor for a
// write before the file was opened or past the payload's end.
void write_payload(PositionalFile* file, const std::string& tensor, PayloadExtent& extent, uint64_t offset,
                   std::span<const uint8_t> bytes);
// Throws naming `tensor` unless its payload was written whole.
void expect_whole_payload(const PositionalFile& file, const std::string& tensor, const PayloadExtent& extent);

}  // namespace k3
