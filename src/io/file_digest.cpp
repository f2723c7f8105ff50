#include "io/file_digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string_view>
#include <vector>

#include "core/sha256.h"
#include "io/file.h"

namespace k3 {
namespace {

constexpr uint64_t kProgressBytes = uint64_t{256} << 20;
constexpr uint64_t kChunk = uint64_t{8} << 20;

struct Stamp {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

std::string cache_text(const Stamp& s, const std::string& sha256) {
  return std::to_string(s.size) + " " + std::to_string(s.mtime_ns) + " " + sha256 + "\n";
}

// The cache holds exactly what a successful check of this size, mtime and digest wrote.
bool cache_says_verified(const std::string& path, const Stamp& s, const std::string& sha256) {
  try {
    const std::shared_ptr<File> f = File::open(digest_cache_path(path));
    if (f->size() > 256) return false;
    std::string text(f->size(), '\0');
    f->read_at(0, text.data(), text.size(), "");
    return text == cache_text(s, sha256);
  } catch (const Error&) {
    return false;
  }
}

// Best effort: a folder we cannot write to just keeps no cache.
void write_cache(const std::string& path, const Stamp& s, const std::string& sha256) {
  const std::string cache = digest_cache_path(path);
  const std::string tmp = cache + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string text = cache_text(s, sha256);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (::close(fd) != 0 || !ok || ::rename(tmp.c_str(), cache.c_str()) != 0) ::unlink(tmp.c_str());
}

}  // namespace

bool valid_sha256_hex(const std::string& hex) {
  if (hex.size() != 64) return false;
  bool nonzero = false;
  for (char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    nonzero |= c != '0';
  }
  return nonzero;
}

std::string digest_cache_path(const std::string& path) { return path + ".sha256-verified"; }

void verify_file_digest(const FileDigest& d) {
  const std::shared_ptr<File> file = File::open(d.path);
  struct stat st {};
  if (::stat(d.path.c_str(), &st) != 0) throw Error(Where{d.path, "", ""}, "cannot stat");
  const Stamp stamp{file->size(), static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  if (cache_says_verified(d.path, stamp, d.sha256)) return;

  const bool progress = file->size() >= kProgressBytes && ::isatty(STDERR_FILENO) == 1;
  Sha256 h;
  std::vector<uint8_t> buf(static_cast<size_t>(std::min(kChunk, std::max<uint64_t>(file->size(), 1))));
  int shown = -1;
  for (uint64_t at = 0; at < file->size();) {
    const uint64_t n = std::min<uint64_t>(buf.size(), file->size() - at);
    file->read_at(at, buf.data(), n, "sha256");
    h.update(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
    at += n;
    const int percent = static_cast<int>(at * 100 / file->size());
    if (progress && percent != shown) {
      std::fprintf(stderr, "\rk3: verifying sha256 of %s: %3d%%", d.path.c_str(), percent);
      shown = percent;
    }
  }
  if (progress) std::fputs("\n", stderr);
  const std::string actual = to_hex(h.finish());
  if (actual != d.sha256) {
    throw Error(Where{d.path, "", ""}, "sha256 mismatch: manifest says " + d.sha256 + ", payload is " + actual);
  }
  write_cache(d.path, stamp, d.sha256);
}

}  // namespace k3
