// Text in, text out through the CLI on a make-tiny Kimi-K3 checkpoint: the tokenizer make-tiny
// writes, `k3 generate --prompt` and `k3 chat --messages`, and their one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tools/cli_runner.h"

namespace k3 {
namespace {

class TinyTextModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "/k3_tiny_text_" + std::to_string(::getpid());
    const test::CliResult r = test::run_k3("make-tiny --arch kimi-k3 --family bf16 --out " + dir_);
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  static nlohmann::json last_json_line(const std::string& out) {
    const size_t end = out.find_last_not_of('\n');
    const size_t start = out.rfind('\n', end);
    return nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1)));
  }

  static std::string dir_;
};
std::string TinyTextModel::dir_;

TEST_F(TinyTextModel, MakeTinyWritesATokenizerMatchingTheConfig) {
  const Tokenizer tok = Tokenizer::load(dir_);
  std::ifstream in(dir_ + "/config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  const nlohmann::json& text = config["text_config"];
  EXPECT_EQ(tok.n_vocab(), text["vocab_size"].get<uint32_t>());
  EXPECT_EQ(tok.num_base(), 256u);
  EXPECT_EQ(tok.special_id("[BOS]"), text["bos_token_id"].get<uint32_t>());
  EXPECT_EQ(tok.special_id("<|end_of_msg|>"), text["eos_token_id"].get<uint32_t>());
  EXPECT_EQ(tok.special_id("[PAD]"), text["pad_token_id"].get<uint32_t>());
  EXPECT_EQ(config["eos_token_id"], text["eos_token_id"]);
}

TEST_F(TinyTextModel, GenerateFromATextPrompt) {
  const test::CliResult r = test::run_k3("generate --model " + dir_ + " --prompt 'Hello <|open|> world' --max-tokens 2 --ignore-eos --json --threads 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = last_json_line(r.out);
  const Tokenizer tok = Tokenizer::load(dir_);
  // Special-token names in the prompt are plain text: one byte-level token per byte here.
  EXPECT_EQ(j["prompt_tokens"], tok.encode("Hello <|open|> world", Specials::kNone).size());
  const auto ids = j["generated_ids"].get<std::vector<uint32_t>>();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(j["text"], tok.decode(ids));
}

TEST_F(TinyTextModel, GenerateNeedsExactlyOneOfIdsAndPrompt) {
  for (const std::string args : {"--ids 1,2 --prompt hi", ""}) {
    const test::CliResult r = test::run_k3("generate --model " + dir_ + " " + args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("k3: usage error: ", 0), 0u) << r.err;
  }
}

TEST_F(TinyTextModel, GenerateWithoutTokenizerNamesTheFile) {
  const std::string bare = dir_ + "_bare";
  std::filesystem::remove_all(bare);
  std::filesystem::copy(dir_, bare);
  std::filesystem::remove(bare + "/tiktoken.model");
  const test::CliResult r = test::run_k3("generate --model " + bare + " --prompt hi --max-tokens 1");
  std::filesystem::remove_all(bare);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(bare + "/tiktoken.model"), std::string::npos) << r.err;
}

TEST_F(TinyTextModel, ChatPrintsTheAssistantMessageLast) {
  const std::string messages = write_file("messages.json", R"({"messages": [{"role": "user", "content": "Hi"}]})");
  const test::CliResult r = test::run_k3("chat --model " + dir_ + " --messages " + messages + " --max-tokens 2 --threads 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = last_json_line(r.out);
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_TRUE(j.contains("content"));
}

TEST_F(TinyTextModel, ChatInteractiveAnswersEachLine) {
  const test::CliResult r = test::run_k3("chat --model " + dir_ + " --max-tokens 1 --threads 2 < " + write_file("lines.txt", "Hi\nAgain\n"));
  ASSERT_EQ(r.code, 0) << r.err;
  size_t replies = 0;
  for (size_t pos = r.out.find("{\"role\":\"assistant\""); pos != std::string::npos; pos = r.out.find("{\"role\":\"assistant\"", pos + 1)) ++replies;
  EXPECT_EQ(replies, 2u) << r.out;
}

TEST_F(TinyTextModel, MalformedMessagesGiveOneLine) {
  const std::string messages = write_file("bad.json", R"({"messages": [{"role": "user", "content": 5}]})");
  const test::CliResult r = test::run_k3("chat --model " + dir_ + " --messages " + messages);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("k3 chat: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("messages[0].content"), std::string::npos) << r.err;
}

TEST_F(TinyTextModel, HostileMessagesFilesGiveOneLineNamingFileAndField) {
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += "{\"a\":";
  deep += "1" + std::string(10000, '}');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":)" +
           deep + "}}]}",
       "field 'tools[0].function.parameters.a.a.a.a.a.a.a.a...': invalid JSON: nesting deeper than 256 levels"},
      {R"([{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":)" + deep +
           "}}]}]",
       "invalid JSON: nesting deeper than 256 levels"},
      {"{\"messages\": [\n  {\"role\": \"user\",, }]}", "invalid JSON at line 2, column 19: syntax error"},
      {"[]", "field 'messages': expected at least one message"},
      {R"({"messages":[]})", "field 'messages': expected at least one message"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string messages = write_file("hostile.json", text);
    const test::CliResult r = test::run_k3("chat --model " + dir_ + " --messages " + messages + " --max-tokens 1 --threads 1");
    EXPECT_EQ(r.code, 1) << expected;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("k3 chat: error: " + messages + ": ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(TinyTextModel, ChatInteractiveWithEmptyStdinIsFine) {
  const test::CliResult r = test::run_k3("chat --model " + dir_ + " --max-tokens 1 --threads 1 < /dev/null");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace k3

namespace {
// Kimi-Linear tiny models render their own chat format: the tiny tokenizer carries its markers.
TEST(CliChatKimiLinear, MessagesFileEndsWithAnAssistantJsonLine) {
  const std::string dir = ::testing::TempDir() + "/k3_chat_kimi_linear";
  auto r = k3::test::run_k3("make-tiny --arch kimi-linear --family bf16 --out " + dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string messages = dir + "/messages.json";
  { std::ofstream(messages) << R"({"messages":[{"role":"user","content":"hi"}]})"; }
  r = k3::test::run_k3("chat --model " + dir + " --messages " + messages + " --max-tokens 2");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string out = r.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const std::string last = out.substr(out.rfind('\n') + 1);
  EXPECT_EQ(nlohmann::json::parse(last)["role"], "assistant") << r.out;
}
}  // namespace
