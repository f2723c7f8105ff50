// Output files: written through a temporary file and a rename (another name of the old file keeps
// its bytes, a failure leaves the old file), and never over a file this process read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "error_of.h"
#include "io/file.h"
#include "io/npy.h"
#include "io/output_file.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/k3_output_file_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

size_t entries(const std::string& dir) { return static_cast<size_t>(std::distance(fs::directory_iterator(dir), {})); }

TEST(OutputFile, AFileThisProcessReadIsNeverOverwritten) {
  const std::string d = fresh_dir("input");
  const std::string in = d + "/in.bin", link = d + "/link.npy";
  std::ofstream(in) << "input bytes";
  File::open(in);  // read once: an input from now on
  fs::create_symlink(in, link);
  const float x = 1;
  EXPECT_EQ(test::error_of([&] { write_npy_f32(in, {1}, &x); }), in + ": is an input of this command; refusing to overwrite it");
  EXPECT_EQ(test::error_of([&] { write_npy_f32(link, {1}, &x); }), link + ": is an input of this command; refusing to overwrite it");
  EXPECT_EQ(test::error_of([&] { check_output_path(in, "--out"); }),
            in + ": field '--out': is an input of this command; refusing to overwrite it");
  EXPECT_EQ(slurp(in), "input bytes");
  EXPECT_EQ(entries(d), 2u);
}

TEST(OutputFile, ReplacesTheOldFileByRename) {
  const std::string d = fresh_dir("rename");
  const std::string other = d + "/other", out = d + "/out.npy";
  std::ofstream(other) << "other name";
  fs::create_hard_link(other, out);
  const float x[2] = {1, 2};
  write_npy_f32(out, {2}, x);
  EXPECT_EQ(slurp(other), "other name");
  EXPECT_EQ(read_npy(out).shape, std::vector<uint64_t>{2});
  EXPECT_EQ(entries(d), 2u);
  // Through a symlink the target is replaced, the link kept.
  const std::string target = d + "/target.npy", link = d + "/link.npy";
  std::ofstream(target) << "old";
  fs::create_symlink(target, link);
  write_npy_f32(link, {2}, x);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_npy(target).shape, std::vector<uint64_t>{2});
  EXPECT_EQ(entries(d), 4u);
}

TEST(OutputFile, FailuresNameThePathAndLeaveNothing) {
  const std::string d = fresh_dir("fail");
  const float x = 1;
  EXPECT_EQ(test::error_of([&] { write_npy_f32(d, {1}, &x); }), d + ": is a directory, not an output file");
  EXPECT_EQ(test::error_of([&] { write_npy_f32(d + "/no/such.npy", {1}, &x); }),
            d + "/no/such.npy: cannot create: No such file or directory");
  EXPECT_EQ(test::error_of([&] { check_output_path(d + "/no/such.npy", "--out"); }),
            d + "/no/such.npy: field '--out': cannot create: " + d + "/no: No such file or directory");
  EXPECT_EQ(entries(d), 0u);
  write_npy_f32("/dev/null", {1}, &x);  // a character device is written in place
}

}  // namespace
}  // namespace k3
