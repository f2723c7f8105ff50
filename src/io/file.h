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

  // Zero-copy view of [offset, offset+n): maps the whole file on first use. Touching a view
  // after the file shrank on disk ends the process: a SIGBUS handler (installed with the first
  // mapping) prints "k3: error: PATH: truncated or changed while in use" and exits 1.
  std::span<const uint8_t> view(uint64_t offset, uint64_t n) const;
  // Gives the mapped pages of [offset, offset+n) and of up to 1 MiB around it back (the next touch
  // reads them again from the page cache), so that a one-pass reader (k3 quantize) keeps its
  // resident set to what it is working on. Nothing happens when the file is not mapped.
  void release_view(uint64_t offset, uint64_t n) const;

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

// Opens `path` read-only (O_CLOEXEC) and returns the descriptor, refusing anything but a regular
// file before it could block (a FIFO, a device). Throws k3::Error naming the path.
int open_regular_file(const std::string& path);
// The whole content of a regular file (through open_regular_file).
std::string read_whole_file(const std::string& path);

struct Where;

// The path of `name`, a file name read from a manifest or index, inside the folder `dir`.
// Refuses (k3::Error at `where`) an empty or absolute name, any `..` component, and a name that,
// after resolving symbolic links, is not inside `dir` — except that a Hugging Face cache snapshot
// (REPO/snapshots/REV) may link its files into that cache's REPO/blobs.
std::string path_inside(const std::string& dir, const std::string& name, const Where& where);

// True when [offset, offset+n) lies inside [0, limit) — written so that no addition can wrap.
inline bool range_fits(uint64_t offset, uint64_t n, uint64_t limit) {
  return offset <= limit && n <= limit - offset;
}

}  // namespace k3
