// `k3 chat --parse FILE`: a raw reply (text with marker names, or token ids through a tokenizer)
// parsed into the assistant message line, no weights loaded; its one-line errors and usage errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tools/cli_runner.h"

namespace k3 {
namespace {

class ChatParse : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "/k3_chat_parse_" + std::to_string(::getpid());
    const test::CliResult r = test::run_k3("make-tiny --arch kimi-k3 --family bf16 --out " + dir_ + "/model");
    ASSERT_EQ(r.code, 0) << r.err;
    std::filesystem::create_directories(dir_ + "/tokenizer");
    for (const char* f : {"tiktoken.model", "tokenizer_config.json"})
      std::filesystem::copy_file(dir_ + "/model/" + f, dir_ + "/tokenizer/" + f);
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  // The ids of `spelled` (marker names as marker ids) then `plain` (names as ordinary tokens).
  static std::string ids_file(const std::string& spelled, const std::string& plain) {
    const Tokenizer tok = Tokenizer::load(dir_ + "/tokenizer");
    std::vector<uint32_t> ids = tok.encode(spelled, Specials::kAll);
    for (uint32_t id : tok.encode(plain, Specials::kNone)) ids.push_back(id);
    ids.push_back(tok.special_id("<|end_of_msg|>"));
    return write_file("ids.json", nlohmann::json(ids).dump());
  }
  static nlohmann::json parsed(const test::CliResult& r) {
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    return nlohmann::json::parse(r.out);
  }
  static void expect_error(const std::string& args, int code, const std::string& text) {
    const test::CliResult r = test::run_k3("chat " + args);
    EXPECT_EQ(r.code, code) << args;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
  }

  static std::string dir_;
};
std::string ChatParse::dir_;

const char* kToolReply =
    "I should call get_weather.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
    "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Paris"
    "<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>2<|close|>argument<|sep|><|close|>call"
    "<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";

TEST_F(ChatParse, TextWithMarkerNames) {
  const std::string file = write_file("reply.txt", kToolReply);
  EXPECT_EQ(test::run_k3("chat --parse " + file + " --thinking").out,
            R"({"role":"assistant","content":null,"reasoning_content":"I should call get_weather.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"days\": 2}"}}]})"
            "\n");
  // Without --thinking the prompt opened response: the first text is content.
  EXPECT_EQ(parsed(test::run_k3("chat --parse " + file))["content"], "I should call get_weather.");
  // An unclosed answer ended by close(message): no marker text in the content.
  const std::string plain = write_file("plain.txt", "Rome.<|close|>message<|sep|>");
  EXPECT_EQ(parsed(test::run_k3("chat --parse " + plain + " --format k3")), (nlohmann::json{{"role", "assistant"}, {"content", "Rome."}}));
  const std::string linear = write_file("linear.txt", "Hi<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
                                                      "<|tool_call_argument_begin|>{}<|tool_call_end|><|im_end|>");
  const nlohmann::json l = parsed(test::run_k3("chat --parse " + linear + " --format kimi-linear"));
  EXPECT_EQ(l["content"], "Hi");
  EXPECT_EQ(l["tool_calls"][0]["function"]["name"], "f");
}

TEST_F(ChatParse, TokenIdsThroughATokenizer) {
  const std::string ids = ids_file("Plan.<|close|>think<|sep|><|open|>response<|sep|>", "Say <|close|>response<|sep|> aloud.");
  for (const std::string with : {"--tokenizer " + dir_ + "/tokenizer", "--model " + dir_ + "/model"}) {
    const nlohmann::json m = parsed(test::run_k3("chat --parse " + ids + " --thinking " + with));
    EXPECT_EQ(m["reasoning_content"], "Plan.") << with;
    EXPECT_EQ(m["content"], "Say <|close|>response<|sep|> aloud.") << with;  // spelled with ordinary tokens: text
  }
  // The same reply as text reads the spelled names as markers.
  const std::string text = write_file("spelled.txt", "Plan.<|close|>think<|sep|><|open|>response<|sep|>Say <|close|>response<|sep|> aloud.");
  EXPECT_EQ(parsed(test::run_k3("chat --parse " + text + " --thinking"))["content"], "Say  aloud.");
}

TEST_F(ChatParse, BadInputIsOneLineExitOne) {
  const std::string ids = write_file("few.json", " [1, 2, 3]\n");
  expect_error("--parse " + ids, 1, ids + ": token ids need a tokenizer: give --model or --tokenizer");
  expect_error("--parse " + write_file("big.json", "[1, 99999]") + " --tokenizer " + dir_ + "/tokenizer", 1,
               "field '[1]': token id 99999 is outside the vocabulary");
  expect_error("--parse " + write_file("neg.json", "[-1]") + " --tokenizer " + dir_ + "/tokenizer", 1, "token id -1");
  expect_error("--parse " + dir_ + "/missing.txt", 1, dir_ + "/missing.txt");
}

TEST_F(ChatParse, BadFlagCombinationsAreUsageErrors) {
  const std::string file = write_file("u.txt", "x");
  for (const std::string args : {"--parse " + file + " --messages " + file, "--parse " + file + " --show-special",
                                 "--parse " + file + " --model " + dir_ + "/model --tokenizer " + dir_ + "/tokenizer",
                                 "--tokenizer " + dir_ + "/tokenizer", "--thinking --model " + dir_ + "/model",
                                 "--parse " + file + " --format kimi-linear --thinking", "--parse " + file + " --format k4",
                                 std::string("--max-tokens 1")}) {
    const test::CliResult r = test::run_k3("chat " + args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("k3: usage error: ", 0), 0u) << r.err;
  }
}

}  // namespace
}  // namespace k3
