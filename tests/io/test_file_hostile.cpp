// Files that change or are not what they claim while k3 uses them: a mapped file truncated
// under a view (SIGBUS), a FIFO where a regular file is expected, names that lead outside their
// folder, whole-file digests.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/sha256.h"
#include "error_of.h"
#include "io/file.h"
#include "io/file_digest.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;
using test::error_of;

std::string tmp(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/file_hostile";
  fs::create_directories(dir);
  return dir + "/" + name;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

struct ChildResult {
  int status = 0;
  std::string err;
};

// Runs fn in a forked child with stderr captured; the child exits 0 if fn returns.
template <class Fn>
ChildResult in_child(Fn&& fn) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(pipe_fds[0]);
    fn();
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  ChildResult r;
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof buf)) > 0) r.err.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

TEST(FileHostile, TruncatedWhileMappedExitsOneNamingTheFile) {
  const std::string path = tmp("shrinks.bin");
  write_bytes(path, std::vector<uint8_t>(1 << 20, 7));
  const ChildResult r = in_child([&] {
    const std::shared_ptr<File> f = File::open(path);
    const std::span<const uint8_t> view = f->view(0, f->size());
    if (::truncate(path.c_str(), 0) != 0) ::_exit(3);
    volatile uint8_t sink = view[view.size() - 1];  // a page past the new end: SIGBUS
    (void)sink;
    ::_exit(4);
  });
  ASSERT_TRUE(WIFEXITED(r.status)) << "status " << r.status << ", stderr: " << r.err;
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.err;
  EXPECT_EQ(r.err, "k3: error: " + path + ": truncated or changed while in use\n");
}

TEST(FileHostile, SigbusOutsideAnyMappingKeepsTheDefaultAction) {
  const std::string path = tmp("mapped.bin");
  write_bytes(path, std::vector<uint8_t>(4096, 1));
  const ChildResult r = in_child([&] {
    const std::shared_ptr<File> f = File::open(path);
    (void)f->view(0, 16);  // installs the handler
    ::raise(SIGBUS);
  });
  ASSERT_TRUE(WIFSIGNALED(r.status)) << "status " << r.status << ", stderr: " << r.err;
  EXPECT_EQ(WTERMSIG(r.status), SIGBUS);
  EXPECT_EQ(r.err.find("truncated"), std::string::npos) << r.err;
}

TEST(FileHostile, FifoIsRefusedWithoutBlocking) {
  const std::string path = tmp("pipe.safetensors");
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  // Without a writer, a blocking open would never return: the child is killed after 10 s.
  const ChildResult r = in_child([&] {
    ::alarm(10);
    const std::string e = error_of([&] { File::open(path); });
    ::_exit(e == path + ": not a regular file" ? 0 : 5);
  });
  ASSERT_TRUE(WIFEXITED(r.status)) << "open blocked or crashed: status " << r.status;
  EXPECT_EQ(WEXITSTATUS(r.status), 0) << r.err;
  EXPECT_EQ(error_of([&] { read_whole_file(path); }), path + ": not a regular file");
  EXPECT_EQ(error_of([&] { sha256_file_hex(path); }), path + ": not a regular file");
  EXPECT_EQ(error_of([&] { File::open(fs::path(path).parent_path().string()); }),
            fs::path(path).parent_path().string() + ": not a regular file");
}

TEST(FileHostile, PathInsideRefusesNamesLeavingTheFolder) {
  const std::string dir = tmp("ckpt");
  const std::string outside = tmp("outside");
  fs::create_directories(dir);
  fs::create_directories(outside);
  const Where where{"index.json", "t", "weight_map"};
  EXPECT_EQ(path_inside(dir, "a.safetensors", where), dir + "/a.safetensors");
  EXPECT_EQ(error_of([&] { path_inside(dir, "../outside/x.safetensors", where); }),
            "index.json: tensor 't': field 'weight_map': file name '../outside/x.safetensors' leads outside the folder " + dir +
                " ('..')");
  EXPECT_EQ(error_of([&] { path_inside(dir, "sub/../../x", where); }).find("('..')") != std::string::npos, true);
  EXPECT_EQ(error_of([&] { path_inside(dir, "/etc/passwd", where); }),
            "index.json: tensor 't': field 'weight_map': file name '/etc/passwd' is not a relative path");
  EXPECT_EQ(error_of([&] { path_inside(dir, "", where); }).find("is not a relative path") != std::string::npos, true);
  // A folder symlink or a file symlink that leads out is refused; links inside the folder are fine.
  fs::remove(dir + "/escape");
  fs::create_directory_symlink(outside, dir + "/escape");
  const std::string e = error_of([&] { path_inside(dir, "escape/x.safetensors", where); });
  EXPECT_NE(e.find("leads outside the folder"), std::string::npos) << e;
  EXPECT_NE(e.find("symbolic link"), std::string::npos) << e;
  fs::remove(dir + "/linked.safetensors");
  fs::create_symlink(outside + "/blob", dir + "/linked.safetensors");
  EXPECT_NE(error_of([&] { path_inside(dir, "linked.safetensors", where); }).find("leads outside the folder"),
            std::string::npos);
  fs::create_directories(dir + "/sub");
  EXPECT_EQ(path_inside(dir, "sub/x", where), dir + "/sub/x");
  fs::remove(dir + "/inner.safetensors");
  fs::create_symlink(dir + "/sub/x", dir + "/inner.safetensors");
  EXPECT_EQ(path_inside(dir, "inner.safetensors", where), dir + "/inner.safetensors");
}

TEST(FileHostile, PathInsideLetsAHubCacheSnapshotLinkIntoItsBlobStore) {
  // REPO/snapshots/REV/x.safetensors -> REPO/blobs/HASH, as the Hugging Face hub cache lays it out.
  const fs::path repo = fs::weakly_canonical(tmp("models--k3--tiny"));
  const fs::path snapshot = repo / "snapshots" / "0123abcd";
  fs::create_directories(snapshot);
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "other");
  const Where where{"index.json", "t", "weight_map"};
  fs::remove(snapshot / "a.safetensors");
  fs::create_symlink(repo / "blobs" / "f00d", snapshot / "a.safetensors");
  EXPECT_EQ(path_inside(snapshot.string(), "a.safetensors", where), (snapshot / "a.safetensors").string());
  fs::remove(snapshot / "b.safetensors");
  fs::create_symlink(repo / "other" / "f00d", snapshot / "b.safetensors");
  EXPECT_NE(error_of([&] { path_inside(snapshot.string(), "b.safetensors", where); }).find("leads outside the folder"),
            std::string::npos);
}

TEST(FileHostile, DigestMismatchNamesBothHashesAndSuccessIsCached) {
  const std::string path = tmp("payload.bin");
  std::vector<uint8_t> bytes(100000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31);
  write_bytes(path, bytes);
  fs::remove(digest_cache_path(path));
  const std::string good = sha256_hex(bytes);
  verify_file_digest({path, good, {}});
  ASSERT_TRUE(fs::exists(digest_cache_path(path)));
  // A flipped byte in place (same size): the mtime changes, so the cache no longer vouches.
  bytes[5000] ^= 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(5000);
    f.put(static_cast<char>(bytes[5000]));
  }
  const std::string bad = sha256_hex(bytes);
  EXPECT_EQ(error_of([&] { verify_file_digest({path, good, {}}); }),
            path + ": sha256 mismatch: manifest says " + good + ", payload is " + bad);
  EXPECT_EQ(valid_sha256_hex(good), true);
  EXPECT_EQ(valid_sha256_hex(std::string(64, '0')), false);
  EXPECT_EQ(valid_sha256_hex(std::string(63, 'a')), false);
  EXPECT_EQ(valid_sha256_hex(std::string(64, 'A')), false);
}

TEST(FileHostile, DigestCacheInAnUnwritableFolderIsSkipped) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes anywhere";
  const std::string dir = tmp("readonly");
  fs::create_directories(dir);
  const std::string path = dir + "/p.bin";
  write_bytes(path, {1, 2, 3});
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  verify_file_digest({path, sha256_hex(std::vector<uint8_t>{1, 2, 3}), {}});
  EXPECT_FALSE(fs::exists(digest_cache_path(path)));
  fs::permissions(dir, fs::perms::owner_all);
}

}  // namespace
}  // namespace k3
