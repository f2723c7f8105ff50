// `k3 tokenize` end to end on the tiny vocabulary: ids equal the library's, errors are one line.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "tokenizer/tiny_vocab.h"
#include "tokenizer/tokenizer.h"

namespace k3 {
namespace {

struct Result {
  int code;
  std::string output;
};

Result run(const std::string& args) {
  const std::string cmd = std::string(K3_CLI_PATH) + " tokenize " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

TEST(CliTokenize, IdsJsonAndErrors) {
  const auto dir = std::filesystem::temp_directory_path() / ("k3_cli_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  write_tiny_tokenizer(dir.string(), 300);
  const Tokenizer tok = Tokenizer::load(dir.string());
  std::string expected;
  for (uint32_t id : tok.encode("the model<|open|>", Specials::kNone)) expected += (expected.empty() ? "" : " ") + std::to_string(id);
  EXPECT_EQ(run("--model " + dir.string() + " --text 'the model<|open|>'").output, expected + "\n");
  EXPECT_EQ(run("--model " + dir.string() + " --text '<|open|>' --specials --json").output,
            "{\"count\":1,\"ids\":[303],\"pieces\":[\"<|open|>\"]}\n");
  const auto bad_file = dir / "bad.txt";
  FILE* f = std::fopen(bad_file.c_str(), "wb");
  std::fputs("a\xff", f);
  std::fclose(f);
  const Result bad_utf8 = run("--model " + dir.string() + " --file " + bad_file.string());
  EXPECT_EQ(bad_utf8.code, 1);
  EXPECT_EQ(bad_utf8.output, "k3 tokenize: error: field 'text': invalid UTF-8 at byte offset 1\n");
  std::filesystem::remove(dir / "tokenizer_config.json");
  const Result missing = run("--model " + dir.string() + " --text x");
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.output.find('\n'), missing.output.size() - 1);  // one line
  EXPECT_EQ(run("--model " + dir.string()).code, 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace k3
