// Special tokens in generated text, through the CLI: a make-tiny Kimi-K3 checkpoint whose lm_head
// can only pick two added tokens (their rows +1 and -1, every other row 0), so that every generated
// token is one of them. `k3 generate --prompt` and `k3 chat` show no added token's name unless
// --show-special.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli_runner.h"

namespace k3 {
namespace {

class SpecialsOnlyModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "/k3_specials_only_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    const test::CliResult r = test::run_k3("make-tiny --arch kimi-k3 --family bf16 --out " + dir_);
    ASSERT_EQ(r.code, 0) << r.err;
    tok_ = new Tokenizer(Tokenizer::load(dir_));
    pick_between(tok_->special_id("<|im_user|>"), tok_->special_id("[EOS]"));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(dir_);
    delete tok_;
    tok_ = nullptr;
  }

  // lm_head rewritten in place (bf16): row a all +1, row b all -1, the others 0.
  static void pick_between(uint32_t a, uint32_t b) {
    const SafetensorsCheckpoint ckpt = SafetensorsCheckpoint::open(dir_);
    const SafetensorsCheckpoint::Entry* head = nullptr;
    for (const auto& e : ckpt.entries())
      if (ckpt.info(e).name.ends_with("lm_head.weight")) head = &e;
    ASSERT_NE(head, nullptr);
    const TensorInfo& info = ckpt.info(*head);
    ASSERT_EQ(info.dtype, Dtype::BF16);
    ASSERT_EQ(info.shape.size(), 2u);
    const uint64_t rows = info.shape[0], cols = info.shape[1];
    std::vector<uint16_t> w(rows * cols, 0);
    for (uint64_t c = 0; c < cols; ++c) {
      w[a * cols + c] = 0x3F80;  // +1
      w[b * cols + c] = 0xBF80;  // -1
    }
    std::fstream f(ckpt.shard_of(*head).path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(info.offset));
    f.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * 2));
    ASSERT_TRUE(f.good());
  }

  static bool has_marker_text(const std::string& s) {
    return s.find("<|im_user|>") != std::string::npos || s.find("[EOS]") != std::string::npos;
  }
  static std::string messages_file() {
    const std::string path = dir_ + "/messages.json";
    std::ofstream(path) << R"({"messages": [{"role": "user", "content": "Hi"}]})";
    return path;
  }

  static std::string dir_;
  static Tokenizer* tok_;
};
std::string SpecialsOnlyModel::dir_;
Tokenizer* SpecialsOnlyModel::tok_ = nullptr;

TEST_F(SpecialsOnlyModel, GenerateHidesThemUnlessShowSpecial) {
  const std::string args = "generate --model " + dir_ + " --prompt hello --max-tokens 4 --ignore-eos --json --threads 2";
  const test::CliResult hidden = test::run_k3(args);
  ASSERT_EQ(hidden.code, 0) << hidden.err;
  const size_t json_at = hidden.out.rfind("\n{");
  ASSERT_NE(json_at, std::string::npos) << hidden.out;
  const nlohmann::json j = nlohmann::json::parse(hidden.out.substr(json_at + 1));
  const auto ids = j["generated_ids"].get<std::vector<uint32_t>>();
  ASSERT_EQ(ids.size(), 4u);
  for (uint32_t id : ids) EXPECT_TRUE(tok_->is_special_id(id)) << id;
  EXPECT_EQ(hidden.out.substr(0, json_at), "");  // the streamed text
  EXPECT_EQ(j["text"], "");

  const test::CliResult shown = test::run_k3(args + " --show-special");
  ASSERT_EQ(shown.code, 0) << shown.err;
  const size_t shown_at = shown.out.rfind("\n{");
  ASSERT_NE(shown_at, std::string::npos) << shown.out;
  const nlohmann::json s = nlohmann::json::parse(shown.out.substr(shown_at + 1));
  EXPECT_EQ(s["generated_ids"], j["generated_ids"]);
  EXPECT_EQ(s["text"], tok_->decode(ids));
  EXPECT_EQ(shown.out.substr(0, shown_at), tok_->decode(ids));
  EXPECT_TRUE(has_marker_text(shown.out)) << shown.out;
}

TEST_F(SpecialsOnlyModel, ChatHidesThemUnlessShowSpecial) {
  const std::string args = "chat --model " + dir_ + " --messages " + messages_file() + " --max-tokens 4 --threads 2";
  const test::CliResult hidden = test::run_k3(args);
  ASSERT_EQ(hidden.code, 0) << hidden.err;
  // Nothing streamed: a newline, then the parsed message, which has no content either.
  EXPECT_EQ(hidden.out, "\n{\"role\":\"assistant\",\"content\":null}\n");

  const test::CliResult shown = test::run_k3(args + " --show-special");
  ASSERT_EQ(shown.code, 0) << shown.err;
  const size_t json_at = shown.out.rfind("\n{");
  ASSERT_NE(json_at, std::string::npos) << shown.out;
  // The raw reply: four added tokens' names, nothing else.
  const std::string raw = shown.out.substr(0, json_at);
  std::string rest = raw;
  for (const std::string name : {"<|im_user|>", "[EOS]"})
    for (size_t p; (p = rest.find(name)) != std::string::npos;) rest.erase(p, name.size());
  EXPECT_EQ(rest, "") << raw;
  EXPECT_TRUE(has_marker_text(raw)) << raw;
}

}  // namespace
}  // namespace k3
