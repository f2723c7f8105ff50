// Hostile command lines on a make-tiny Kimi-K3 checkpoint: an output that is one of the command's
// inputs (refused, the input untouched), atomic replacement of outputs, out-of-range and malformed
// numbers (usage errors with short bounds), unknown options named first, paths that are not regular
// files or loop, and make-tiny's output directory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "io/npy.h"
#include "tools/cli_runner.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

class HostileCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "/k3_hostile_" + std::to_string(::getpid());
    fs::remove_all(dir_);
    const test::CliResult r = test::run_k3("make-tiny --arch kimi-k3 --family bf16 --out " + dir_);
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::set<std::string> listing(const std::string& dir) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    return names;
  }
  static std::string scratch(const std::string& name) {
    const std::string d = ::testing::TempDir() + "/k3_hostile_scratch_" + std::to_string(::getpid()) + "_" + name;
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }
  static void expect_usage_error(const test::CliResult& r, const std::string& text, const std::string& args) {
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("k3: usage error: ", 0), 0u) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(text), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    EXPECT_LT(r.err.size(), 300u) << args << "\n" << r.err;  // short bounds, no 300-digit limit
  }

  static std::string dir_;
};
std::string HostileCli::dir_;

TEST_F(HostileCli, LogitsRefusesToOverwriteAnyFileItRead) {
  const std::set<std::string> before = listing(dir_);
  for (const std::string name : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                 "model.safetensors.index.json", "config.json"}) {
    const std::string path = dir_ + "/" + name;
    const std::string bytes = test::slurp(path);
    const test::CliResult r = test::run_k3("logits --model " + dir_ + " --ids 1,2 --out " + path);
    EXPECT_EQ(r.code, 1) << name;
    EXPECT_EQ(r.err, "k3 logits: error: " + path + ": field '--out': is an input of this command; refusing to overwrite it\n");
    EXPECT_EQ(test::slurp(path), bytes) << name;
    EXPECT_EQ(listing(dir_), before) << name;  // no temporary file left behind
  }
}

TEST_F(HostileCli, AnOutputReachingAnInputThroughALinkIsRefused) {
  const std::string shard = dir_ + "/model-00001-of-00002.safetensors";
  const std::string bytes = test::slurp(shard);
  const std::string d = scratch("links");
  fs::create_symlink(shard, d + "/sym.npy");
  fs::create_hard_link(shard, d + "/hard.npy");
  for (const std::string& out : {d + "/sym.npy", d + "/hard.npy"}) {
    const test::CliResult r = test::run_k3("logits --model " + dir_ + " --ids 1 --out " + out);
    EXPECT_EQ(r.code, 1) << out;
    EXPECT_NE(r.err.find("is an input of this command"), std::string::npos) << r.err;
  }
  EXPECT_EQ(test::slurp(shard), bytes);
  fs::remove_all(d);
}

TEST_F(HostileCli, InspectRefusesToOverwriteTheFileItDequantizes) {
  const std::string shard = dir_ + "/model-00001-of-00002.safetensors";
  const std::string bytes = test::slurp(shard);
  const test::CliResult r = test::run_k3("inspect " + shard + " --tensor language_model.model.layers.0.self_attn.A_log --dequant --out " + shard);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "k3 inspect: error: " + shard + ": field '--out': is an input of this command; refusing to overwrite it\n");
  EXPECT_EQ(test::slurp(shard), bytes);
}

// The output is written to a new file and renamed into place: another name of the old file keeps
// its bytes, and a run that fails leaves an existing output as it was.
TEST_F(HostileCli, OutputsReplaceTheOldFileAtomically) {
  const std::string d = scratch("atomic");
  const std::string keep = d + "/keep.txt", out = d + "/out.npy";
  std::ofstream(keep) << "keep me";
  fs::create_hard_link(keep, out);
  const test::CliResult ok = test::run_k3("logits --model " + dir_ + " --ids 1,2 --out " + out);
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(test::slurp(keep), "keep me");
  EXPECT_EQ(read_npy(out).shape.size(), 2u);
  EXPECT_EQ(listing(d), (std::set<std::string>{"keep.txt", "out.npy"}));

  const std::string old = test::slurp(out);
  const test::CliResult bad = test::run_k3("logits --model " + dir_ + " --ids 1,99999 --out " + out);
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(test::slurp(out), old);

  const test::CliResult no_dir = test::run_k3("logits --model " + dir_ + " --ids 1 --out " + d + "/missing/out.npy");
  EXPECT_EQ(no_dir.code, 1);
  EXPECT_NE(no_dir.err.find("field '--out': cannot create"), std::string::npos) << no_dir.err;
  const test::CliResult is_dir = test::run_k3("logits --model " + dir_ + " --ids 1 --out " + d);
  EXPECT_EQ(is_dir.code, 1);
  EXPECT_EQ(is_dir.err, "k3 logits: error: " + d + ": field '--out': is a directory, not an output file\n");
  fs::remove_all(d);
}

TEST_F(HostileCli, MakeTinyWritesOnlyANewEmptyOrEarlierMakeTinyDirectory) {
  const std::string d = scratch("make_tiny");
  const std::string file = d + "/a-file", foreign = d + "/foreign";
  std::ofstream(file) << "data";
  fs::create_directories(foreign);
  std::ofstream(foreign + "/config.json") << "{}";
  const test::CliResult on_file = test::run_k3("make-tiny --out " + file);
  EXPECT_EQ(on_file.code, 1);
  EXPECT_EQ(on_file.err, "k3 make-tiny: error: " + file + ": field '--out': exists and is not a directory\n");
  EXPECT_EQ(test::slurp(file), "data");
  const test::CliResult under_file = test::run_k3("make-tiny --out " + file + "/sub");
  EXPECT_EQ(under_file.code, 1);
  EXPECT_EQ(under_file.err.find("filesystem error"), std::string::npos) << under_file.err;
  EXPECT_NE(under_file.err.find(file + "/sub: not a directory"), std::string::npos) << under_file.err;
  const test::CliResult on_foreign = test::run_k3("make-tiny --out " + foreign);
  EXPECT_EQ(on_foreign.code, 1);
  EXPECT_NE(on_foreign.err.find("neither empty nor an earlier make-tiny output"), std::string::npos) << on_foreign.err;
  EXPECT_EQ(test::slurp(foreign + "/config.json"), "{}");
  EXPECT_EQ(listing(foreign), (std::set<std::string>{"config.json"}));
  // Writing over an earlier make-tiny output is allowed (the suite's checkpoint is one).
  const test::CliResult again = test::run_k3("make-tiny --arch kimi-k3 --family bf16 --out " + dir_);
  EXPECT_EQ(again.code, 0) << again.err;
  fs::remove_all(d);
}

TEST_F(HostileCli, NumericFlagsOutOfRangeAreUsageErrorsWithShortBounds) {
  const std::string gen = "generate --model " + dir_ + " --ids 1 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {gen + "--threads 100000", "--threads: '100000' is out of range [0, "},
      {gen + "--threads -1", "--threads: '-1' is not an integer in [0, "},
      {"logits --model " + dir_ + " --ids 1 --out x.npy --threads 100000", "--threads: '100000' is out of range"},
      {"chat --model " + dir_ + " --threads 100000", "--threads: '100000' is out of range"},
      {gen + "--max-tokens 99999999999999999999", "--max-tokens: '99999999999999999999' is out of range [0, "},
      {gen + "--max-tokens 1.5", "--max-tokens: '1.5' is not an integer"},
      {gen + "--temperature 1 --seed -1", "--seed: '-1' is not an integer in [0, 18446744073709551615]"},
      {gen + "--temperature 1 --seed 18446744073709551616", "--seed: '18446744073709551616' is not an integer"},
      {gen + "--temperature 0", "--temperature: '0' is not a number in (0, 100]"},
      {gen + "--temperature nan", "--temperature: 'nan' is not a number"},
      {gen + "--temperature 1 --top-p 2", "--top-p: '2' is not a number in (0, 1]"},
      {gen + "--temperature 1 --top-k -2", "--top-k: '-2' is not an integer in [0, 2147483647]"},
      {gen + "--max-context -5", "--max-context: '-5' is not an integer in [1, "},
      {gen + "--max-sequences 0", "--max-sequences: '0' is out of range [1, 4096]"},
      {gen + "--gpu-memory banana", "--gpu-memory: 'banana' is not a size (e.g. 80G, 512M, 90%)"},
      {gen + "--gpu-memory 101%", "--gpu-memory: '101%' is not a size"},
      {gen + "--device tpu", "--device: 'tpu' is not a device (cpu, cuda or cuda:N)"},
      {gen + "--expert-cache 2X", "--expert-cache: '2X' is not a size"},
      {gen + "--experts-on-cpu 0", "--experts-on-cpu: '0' is out of range [1, "},
      {"make-tiny --out x --family nope", "--family: unknown family 'nope'"},
      {"make-tiny --out x --arch nope", "--arch: unknown architecture 'nope'"},
      {"make-tiny --out x --size nope", "--size: unknown size 'nope'"},
      {"make-tiny --out x --seed -1", "--seed: '-1' is not an integer"},
      {"bench --synthetic x --steps 99999999999", "--steps: '99999999999' is out of range [1, "},
      {"bench --synthetic x --layers -1", "--layers: '-1' is not an integer in [0, "},
  };
  for (const auto& [args, text] : cases) expect_usage_error(test::run_k3(args), text, args);
}

TEST_F(HostileCli, UnknownOptionsAreNamedFirst) {
  for (const std::string cmd : {"inspect", "check", "make-tiny", "devices", "tokenize", "logits", "generate", "chat", "bench"}) {
    const test::CliResult r = test::run_k3(cmd + " --bogus");
    EXPECT_EQ(r.code, 2) << cmd;
    EXPECT_EQ(r.err, "k3: usage error: unknown option --bogus (see k3 --help)\n") << cmd;
  }
  const test::CliResult r = test::run_k3("check --bogus --other");
  EXPECT_EQ(r.err, "k3: usage error: unknown option --bogus (and 1 more) (see k3 --help)\n");
}

TEST_F(HostileCli, CudaSizingFlagsNeedACudaDevice) {
  const std::string gen = "generate --model " + dir_ + " --ids 1 ";
  const test::CliResult mem = test::run_k3(gen + "--gpu-memory 10G");
  EXPECT_EQ(mem.code, 1);
  EXPECT_EQ(mem.err, "k3 generate: error: field '--gpu-memory': sizes the CUDA memory arena: it needs --device cuda\n");
  const test::CliResult seqs = test::run_k3(gen + "--max-sequences 4");
  EXPECT_EQ(seqs.code, 1);
  EXPECT_EQ(seqs.err, "k3 generate: error: field '--max-sequences': sizes the CUDA state slots: it needs --device cuda\n");
  const test::CliResult hybrid = test::run_k3(gen + "--experts-on-cpu 2");
  EXPECT_EQ(hybrid.code, 1);
  EXPECT_EQ(hybrid.err, "k3 generate: error: field '--experts-on-cpu': divides the experts between the CPU and a GPU: it needs --device cuda\n");
  const test::CliResult dense = test::run_k3(gen + "--dense-linears packed");
  EXPECT_EQ(dense.code, 1);
  EXPECT_EQ(dense.err, "k3 generate: error: field '--dense-linears': chooses the CUDA dense linears' form: it needs --device cuda\n");
  const test::CliResult bad = test::run_k3(gen + "--dense-linears fp4");
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err.rfind("k3: usage error: --dense-linears: ", 0), 0u) << bad.err;
}

TEST_F(HostileCli, TokenizeFileMustBeARegularFile) {
  const test::CliResult r = test::run_k3("tokenize --model " + dir_ + " --file " + dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "k3 tokenize: error: " + dir_ + ": not a regular file\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(HostileCli, SymlinkLoopsAreOneLineNamingThePath) {
  const std::string d = scratch("loop");
  const std::string a = d + "/a", b = d + "/b";
  fs::create_symlink(b, a);
  fs::create_symlink(a, b);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"check " + a, "k3 check: error: "},
      {"inspect " + a, "k3 inspect: error: "},
      {"generate --model " + a + " --ids 1", "k3 generate: error: "},
      {"make-tiny --out " + a, "k3 make-tiny: error: "},
  };
  for (const auto& [args, prefix] : cases) {
    const test::CliResult r = test::run_k3(args);
    EXPECT_EQ(r.code, 1) << args;
    EXPECT_EQ(r.err, prefix + a + ": too many levels of symbolic links\n") << args;
  }
  fs::remove_all(d);
}

}  // namespace
}  // namespace k3
