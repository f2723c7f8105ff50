#include "io/file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/output_file.h"

namespace k3 {
namespace {
std::atomic<uint64_t> g_payload_maps{0};

// Live payload mappings, for the SIGBUS handler: a file truncated (or replaced in place) while
// mapped faults on the next touch of a vanished page. Slots are claimed and released under
// g_mappings_mutex; the handler reads them lock-free (begin is published last, cleared first).
constexpr size_t kMaxMappings = 4096;
struct MappingSlot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<const char*> path{nullptr};
};
MappingSlot g_mappings[kMaxMappings];
std::mutex g_mappings_mutex;
std::once_flag g_sigbus_once;

void write_all(const char* text, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}

void write_str(const char* text) { write_all(text, std::strlen(text)); }  // strlen is async-signal-safe

void on_sigbus(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  if (info->si_code > 0) {  // raised by the kernel for a memory access, not sent by kill()
    for (const MappingSlot& slot : g_mappings) {
      const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
      if (begin == 0 || addr < begin || addr >= slot.end.load(std::memory_order_relaxed)) continue;
      const char* path = slot.path.load(std::memory_order_relaxed);
      write_str("k3: error: ");
      write_str(path != nullptr ? path : "?");
      write_str(": truncated or changed while in use\n");
      ::_exit(1);
    }
  }
  // Not a payload mapping: the default action (a re-executed access faults again, a sent signal is re-raised).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  if (info->si_code <= 0) ::raise(sig);
}

void install_sigbus_handler() {
  std::call_once(g_sigbus_once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  });
}

// Registers a mapping (it goes untracked when every slot is taken).
void register_mapping(const void* p, uint64_t size, const char* path) {
  std::lock_guard lock(g_mappings_mutex);
  for (MappingSlot& slot : g_mappings) {
    if (slot.begin.load(std::memory_order_relaxed) != 0) continue;
    slot.path.store(path, std::memory_order_relaxed);
    slot.end.store(reinterpret_cast<uintptr_t>(p) + size, std::memory_order_relaxed);
    slot.begin.store(reinterpret_cast<uintptr_t>(p), std::memory_order_release);
    return;
  }
}

void unregister_mapping(const void* p) {
  std::lock_guard lock(g_mappings_mutex);
  for (MappingSlot& slot : g_mappings) {
    if (slot.begin.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(p)) {
      slot.begin.store(0, std::memory_order_release);
      return;
    }
  }
}
}  // namespace

int open_regular_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(Where{path, "", ""}, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(Where{path, "", ""}, "not a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(Where{path, "", ""}, std::string("fcntl failed: ") + std::strerror(err));
  }
  return fd;
}

std::string read_whole_file(const std::string& path) {
  const std::shared_ptr<File> file = File::open(path);
  std::string out(file->size(), '\0');
  file->read_at(0, out.data(), out.size(), "");
  return out;
}

namespace {

// True when `path` is `root` or below it (both canonical).
bool is_within(const std::filesystem::path& root, const std::filesystem::path& path) {
  const auto [r, p] = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
  return r == root.end();
}

// `path` with every symbolic link resolved, also a final link whose target does not exist (which
// weakly_canonical would leave unresolved); a chain longer than kMaxLinkHops is an error.
std::filesystem::path resolve_links(std::filesystem::path path) {
  constexpr int kMaxLinkHops = 40;
  for (int hops = 0; std::filesystem::is_symlink(path); ++hops) {
    if (hops == kMaxLinkHops) throw std::filesystem::filesystem_error("resolve", path, std::make_error_code(std::errc::too_many_symbolic_link_levels));
    const std::filesystem::path link = std::filesystem::read_symlink(path);
    path = link.is_absolute() ? link : path.parent_path() / link;
  }
  return std::filesystem::weakly_canonical(path);
}

// The Hugging Face hub cache keeps a revision as REPO/snapshots/REV/ whose files are symbolic links
// into REPO/blobs/: the one place outside a checkpoint folder its files may lead to.
bool is_hf_snapshot(const std::filesystem::path& root) {
  return root.has_parent_path() && root.parent_path().filename() == "snapshots";
}
std::filesystem::path hf_blob_store(const std::filesystem::path& root) { return root.parent_path().parent_path() / "blobs"; }

}  // namespace

std::string path_inside(const std::string& dir, const std::string& name, const Where& where) {
  namespace fs = std::filesystem;
  const fs::path rel(name);
  if (name.empty() || rel.is_absolute() || rel.has_root_name() || rel.has_root_directory()) {
    throw Error(where, "file name '" + name + "' is not a relative path");
  }
  for (const fs::path& part : rel) {
    if (part == "..") throw Error(where, "file name '" + name + "' leads outside the folder " + dir + " ('..')");
  }
  const fs::path full = fs::path(dir) / rel;
  try {
    const fs::path base = dir.empty() ? fs::path(".") : fs::path(dir);
    const fs::path root = fs::weakly_canonical(base);
    const fs::path target = resolve_links(base / rel);
    const bool inside = is_within(root, target) || (is_hf_snapshot(root) && is_within(hf_blob_store(root), target));
    if (!inside) {
      throw Error(where, "file name '" + name + "' leads outside the folder " + dir + " (through a symbolic link to " +
                             target.string() + ")");
    }
  } catch (const fs::filesystem_error& e) {
    throw Error(where, "cannot resolve file name '" + name + "': " + e.code().message());
  }
  return full.string();
}

std::shared_ptr<File> File::open(const std::string& path) {
  const int fd = open_regular_file(path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(Where{path, "", ""}, std::string("cannot stat: ") + std::strerror(err));
  }
  note_input_file(path, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
  return std::shared_ptr<File>(new File(path, fd, static_cast<uint64_t>(st.st_size)));
}

File::File(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}

File::~File() {
  if (map_ != nullptr) {
    unregister_mapping(map_);
    ::munmap(const_cast<uint8_t*>(map_), size_);
  }
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
    install_sigbus_handler();
    register_mapping(p, size_, path_.c_str());
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

void File::release_view(uint64_t offset, uint64_t n) const {
  if (map_ == nullptr || n == 0 || !range_fits(offset, n, size_)) return;
  // The kernel maps pages around a faulting one that are already cached (fault-around, 64 KiB by
  // default): neighbours read before would stay mapped. Releasing a margin around the range drops
  // them too (a page released early is only read again from the page cache).
  constexpr uint64_t kMargin = uint64_t{1} << 20;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (offset > kMargin ? offset - kMargin : 0) / page * page;
  const uint64_t end = std::min(size_, (offset + n + kMargin + page - 1) / page * page);
  ::madvise(const_cast<uint8_t*>(map_) + begin, end - begin, MADV_DONTNEED);
}

uint64_t File::payload_maps() { return g_payload_maps.load(); }

}  // namespace k3
