// --grammar / --json-schema on `k3 generate` and `k3 chat`, on a make-tiny Kimi-K3 (random weights:
// only the grammar makes the output valid): the generated text is in the grammar's language, a
// schema's JSON validates, chat's reply content validates, and bad files are one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "tools/cli_runner.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

class CliGrammar : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "/k3_cli_grammar_" + std::to_string(::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const test::CliResult r = test::run_k3("make-tiny --arch kimi-k3 --family bf16 --seed 4 --out " + dir_ + "/model");
    ASSERT_EQ(r.code, 0) << r.err;
    write("schema.json", kSchema);
    write("yes_no.gbnf", "root ::= (\"yes\" | \"no\") \" please\"\n");
    write("bad.gbnf", "root ::= \"a\" |\n  ( \"b\"\n");
    write("unsupported.json", R"({"type": "number", "multipleOf": 3})");
    write("messages.json", R"({"messages": [{"role": "user", "content": "A person, please."}], "chat_template_kwargs": {"thinking": false}})");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static void write(const std::string& name, const std::string& text) { std::ofstream(dir_ + "/" + name) << text; }
  static std::string path(const std::string& name) { return dir_ + "/" + name; }

  static constexpr const char* kSchema =
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}, "age": {"type": "integer", "minimum": 0, "maximum": 99},
          "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}}, "required": ["name", "age", "tags"], "additionalProperties": false})";
  static std::string dir_;
};
std::string CliGrammar::dir_;

TEST_F(CliGrammar, GenerateFollowsAGbnfGrammar) {
  for (const char* sampling : {"--greedy", "--temperature 1.5 --seed 9"}) {
    const test::CliResult r = test::run_k3("generate --model " + path("model") + " --prompt 'Say it' --max-tokens 40 --json " +
                                           sampling + " --grammar " + path("yes_no.gbnf"));
    ASSERT_EQ(r.code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1));
    EXPECT_TRUE(j["stopped_at_eos"].get<bool>()) << r.out;
    const std::string text = r.out.substr(0, r.out.find('\n'));
    EXPECT_TRUE(text == "yes please" || text == "no please") << text;
  }
}

TEST_F(CliGrammar, GenerateAndChatFollowAJsonSchema) {
  const grammar::OrderedJson schema = grammar::OrderedJson::parse(kSchema);
  for (uint64_t seed : {1, 2, 3}) {
    const std::string sampling = " --temperature 1 --seed " + std::to_string(seed) + " --json-schema " + path("schema.json");
    const test::CliResult gen = test::run_k3("generate --model " + path("model") + " --prompt 'A person:' --max-tokens 300" + sampling);
    ASSERT_EQ(gen.code, 0) << gen.err;
    const std::string text = gen.out.substr(0, gen.out.size() - 1);
    EXPECT_EQ(grammar::json_schema_violation(grammar::OrderedJson::parse(text), schema), "") << text;

    const test::CliResult chat = test::run_k3("chat --model " + path("model") + " --messages " + path("messages.json") + " --max-tokens 300" + sampling);
    ASSERT_EQ(chat.code, 0) << chat.err;
    const nlohmann::json reply = nlohmann::json::parse(chat.out.substr(chat.out.rfind('\n', chat.out.size() - 2) + 1));
    ASSERT_TRUE(reply["content"].is_string()) << chat.out;
    EXPECT_EQ(grammar::json_schema_violation(grammar::OrderedJson::parse(reply["content"].get<std::string>()), schema), "") << chat.out;
  }
}

TEST_F(CliGrammar, BadFilesAndFlagsAreOneLineErrors) {
  const std::string model = " --model " + path("model") + " --prompt x --max-tokens 4";
  test::CliResult r = test::run_k3("generate" + model + " --grammar " + path("bad.gbnf"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(path("bad.gbnf")), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("grammar:"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = test::run_k3("generate" + model + " --json-schema " + path("unsupported.json"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("multipleOf"), std::string::npos) << r.err;
  r = test::run_k3("generate" + model + " --json-schema " + path("yes_no.gbnf"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("not JSON"), std::string::npos) << r.err;
  r = test::run_k3("generate" + model + " --grammar " + path("yes_no.gbnf") + " --json-schema " + path("schema.json"));
  EXPECT_EQ(r.code, 2) << r.err;
  r = test::run_k3("chat --model " + path("model") + " --grammar " + path("missing.gbnf"));
  EXPECT_EQ(r.code, 2) << r.err;
  // "no please" and EOS: 10 tokens at the least.
  r = test::run_k3("generate" + model + " --grammar " + path("yes_no.gbnf"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("'--max-tokens': 4 is below the 10 tokens"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// A budget that the sampled text would overrun: it closes early, on the shortest valid ending.
TEST_F(CliGrammar, TextEndsCompleteWithinMaxTokens) {
  const test::CliResult r = test::run_k3("generate --model " + path("model") + " --prompt x --max-tokens 10 --json --temperature 1 --seed 5 --grammar " +
                                         path("yes_no.gbnf"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "no please");
}

}  // namespace
}  // namespace k3
