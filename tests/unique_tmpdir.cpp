// Linked into every test binary, k3_test_cuda too: each test process gets its own TempDir(). ctest
// (and scripts/gpu.sh's shards) run the tests of one binary as parallel processes, and fixtures write
// checkpoints under fixed names there.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

struct UniqueTestTmpdir {
  std::string dir = "/tmp/k3_test_" + std::to_string(::getpid());
  UniqueTestTmpdir() {
    ::mkdir(dir.c_str(), 0700);
    ::setenv("TEST_TMPDIR", dir.c_str(), 1);
  }
  ~UniqueTestTmpdir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

const UniqueTestTmpdir g_unique_test_tmpdir;

}  // namespace
