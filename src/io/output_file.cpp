#include "io/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "core/error.h"

namespace k3 {
namespace {

// Every file opened for reading, by (device, inode), with the paths it was opened under. An entry
// counts only while one of its paths still names that inode: a deleted input's inode may be reused.
std::mutex g_inputs_mutex;
std::map<std::pair<uint64_t, uint64_t>, std::set<std::string>>& inputs() {
  static std::map<std::pair<uint64_t, uint64_t>, std::set<std::string>> map;
  return map;
}

bool is_input(const struct stat& st) {
  const std::pair<uint64_t, uint64_t> key{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  std::lock_guard<std::mutex> lock(g_inputs_mutex);
  const auto it = inputs().find(key);
  if (it == inputs().end()) return false;
  for (const std::string& path : it->second) {
    struct stat now {};
    if (::stat(path.c_str(), &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino) return true;
  }
  return false;
}

[[noreturn]] void fail(const std::string& path, const std::string& flag, const std::string& message) {
  throw Error(Where{path, "", flag}, message);
}

void write_all(int fd, std::span<const uint8_t> bytes, const std::string& path, const std::string& flag) {
  const uint8_t* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path, flag, std::string("write failed: ") + std::strerror(n < 0 ? errno : EIO));
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// The file a write to `path` lands in: a symlink is followed to its target.
std::string write_target(const std::string& path, const std::string& flag) {
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return path;
  std::error_code ec;
  const std::filesystem::path target = std::filesystem::weakly_canonical(path, ec);
  if (ec) fail(path, flag, "cannot resolve: " + ec.message());
  return target.string();
}

}  // namespace

void note_input_file(const std::string& path, uint64_t device, uint64_t inode) {
  std::lock_guard<std::mutex> lock(g_inputs_mutex);
  inputs()[{device, inode}].insert(path);
}

void refuse_input_overwrite(const std::string& path, const std::string& flag) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    fail(path, flag, std::string("cannot write: ") + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) fail(path, flag, "is a directory, not an output file");
  if (is_input(st)) fail(path, flag, "is an input of this command; refusing to overwrite it");
}

void check_output_path(const std::string& path, const std::string& flag) {
  refuse_input_overwrite(path, flag);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) return;
  const std::filesystem::path target(write_target(path, flag));
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  if (::stat(dir.c_str(), &st) != 0) fail(path, flag, "cannot create: " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) fail(path, flag, "cannot create: " + dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) fail(path, flag, "cannot create: " + dir + ": " + std::strerror(errno));
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes, const std::string& flag) {
  refuse_input_overwrite(path, flag);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail(path, flag, std::string("cannot write: ") + std::strerror(errno));
    try {
      write_all(fd, bytes, path, flag);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    return;
  }
  const std::string target = write_target(path, flag);
  const std::filesystem::path target_path(target);
  const std::string dir = target_path.has_parent_path() ? target_path.parent_path().string() : ".";
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = dir + "/." + target_path.filename().string() + ".k3tmp-" + std::to_string(::getpid()) +
                          "-" + std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail(path, flag, std::string("cannot create: ") + std::strerror(errno));
  try {
    write_all(fd, bytes, path, flag);
    if (::fsync(fd) != 0) fail(path, flag, std::string("write failed: ") + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, flag, std::string("write failed: ") + std::strerror(err));
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, flag, std::string("cannot write: ") + std::strerror(err));
  }
}

}  // namespace k3
