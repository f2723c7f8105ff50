// A read-only file: small header reads go through pread (no mapping), tensor payloads through
// one lazily created read-only mmap. Header-only tools (`k3 check`) therefore never map a file,
// and File::payload_maps() proves it in tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace k3 {

class File {
 public:
  // Throws k3::Error naming the path when it cannot be opened or is not a regular file.
  static std::shared_ptr<File> open(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Reads exactly n bytes at offset; throws (naming `what`) if the range is outside the file.
  void read_at(uint64_t offset, void* dst, uint64_t n, const char* what) const;
  std::vector<uint8_t> read_range(uint64_t offset, uint64_t n, const char* what) const;

  // Zero-copy view of [offset, offset+n): maps the whole file on first use.
  std::span<const uint8_t> view(uint64_t offset, uint64_t n) const;

  // Number of payload mappings created by any File in this process (for tests of header-only paths).
  static uint64_t payload_maps();

 private:
  File(std::string path, int fd, uint64_t size);
  void map_once() const;

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  mutable const uint8_t* map_ = nullptr;
  mutable std::once_flag map_flag_;
};

// True when [offset, offset+n) lies inside [0, limit) — written so that no addition can wrap.
inline bool range_fits(uint64_t offset, uint64_t n, uint64_t limit) {
  return offset <= limit && n <= limit - offset;
}

}  // namespace k3
