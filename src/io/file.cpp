#include "io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/output_file.h"

namespace k3 {
namespace {
std::atomic<uint64_t> g_payload_maps{0};
}  // namespace

std::shared_ptr<File> File::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(Where{path, "", ""}, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(Where{path, "", ""}, "not a regular file");
  }
  note_input_file(path, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
  return std::shared_ptr<File>(new File(path, fd, static_cast<uint64_t>(st.st_size)));
}

File::File(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}

File::~File() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

void File::read_at(uint64_t offset, void* dst, uint64_t n, const char* what) const {
  if (!range_fits(offset, n, size_)) {
    throw Error(Where{path_, "", what},
                "truncated file: needs bytes [" + std::to_string(offset) + ", +" + std::to_string(n) +
                    ") but the file has " + std::to_string(size_) + " bytes");
  }
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw Error(Where{path_, "", what}, std::string("read failed: ") + std::strerror(errno));
    out += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

std::vector<uint8_t> File::read_range(uint64_t offset, uint64_t n, const char* what) const {
  if (!range_fits(offset, n, size_)) read_at(offset, nullptr, n, what);  // throws the message
  std::vector<uint8_t> out(n);
  read_at(offset, out.data(), n, what);
  return out;
}

void File::map_once() const {
  std::call_once(map_flag_, [this] {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw Error(Where{path_, "", ""}, std::string("mmap failed: ") + std::strerror(errno));
    map_ = static_cast<const uint8_t*>(p);
    g_payload_maps.fetch_add(1);
  });
}

std::span<const uint8_t> File::view(uint64_t offset, uint64_t n) const {
  if (!range_fits(offset, n, size_)) {
    throw Error(Where{path_, "", ""}, "range [" + std::to_string(offset) + ", +" + std::to_string(n) +
                                          ") is outside the file (" + std::to_string(size_) + " bytes)");
  }
  if (n == 0) return {};
  map_once();
  return {map_ + offset, static_cast<size_t>(n)};
}

uint64_t File::payload_maps() { return g_payload_maps.load(); }

}  // namespace k3
