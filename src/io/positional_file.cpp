#include "io/positional_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/file.h"

namespace k3 {

PositionalFile::PositionalFile(const std::string& path, uint64_t size) : path_(path), size_(size) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(Where{path, "", ""}, std::string("cannot create: ") + std::strerror(errno));
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw Error(Where{path, "", ""}, std::string("cannot size the file: ") + std::strerror(err));
  }
}

PositionalFile::~PositionalFile() {
  if (fd_ >= 0) ::close(fd_);
}

void PositionalFile::write_at(uint64_t offset, std::span<const uint8_t> bytes) {
  if (fd_ < 0) throw Error(Where{path_, "", ""}, "write after close");
  if (!range_fits(offset, bytes.size(), size_)) {
    throw Error(Where{path_, "", ""}, "write of [" + std::to_string(offset) + ", +" + std::to_string(bytes.size()) +
                                          ") is outside the file (" + std::to_string(size_) + " bytes)");
  }
  const uint8_t* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::pwrite(fd_, p, left, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(Where{path_, "", ""}, std::string("write failed: ") + std::strerror(n < 0 ? errno : EIO));
    p += n;
    offset += static_cast<uint64_t>(n);
    left -= static_cast<size_t>(n);
  }
}

void PositionalFile::close() {
  const int fd = fd_;
  fd_ = -1;
  if (fd >= 0 && ::close(fd) != 0) throw Error(Where{path_, "", ""}, std::string("write failed: ") + std::strerror(errno));
}

void write_payload(PositionalFile* file, const std::string& tensor, PayloadExtent& extent, uint64_t offset,
                   std::span<const uint8_t> bytes) {
  if (!file) throw Error(Where{"", tensor, ""}, "written before the file was opened");
  if (!range_fits(offset, bytes.size(), extent.nbytes) || extent.written + bytes.size() > extent.nbytes) {
    throw Error(Where{file->path(), tensor, ""}, "write of [" + std::to_string(offset) + ", +" + std::to_string(bytes.size()) +
                                                     ") exceeds the tensor's " + std::to_string(extent.nbytes) + " bytes");
  }
  file->write_at(extent.offset + offset, bytes);
  extent.written += bytes.size();
}

void expect_whole_payload(const PositionalFile& file, const std::string& tensor, const PayloadExtent& extent) {
  if (extent.written != extent.nbytes) {
    throw Error(Where{file.path(), tensor, ""}, "only " + std::to_string(extent.written) + " of " + std::to_string(extent.nbytes) +
                                                   " payload bytes were written");
  }
}

}  // namespace k3
