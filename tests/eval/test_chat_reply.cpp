// The compare step on hand-made replies: the reply text docs/eval-tasks.md gives, tokenized,
// decoded, parsed and compared, is correct in both chat formats; prompts, stop ids and the cap.
#include <gtest/gtest.h>

#include <filesystem>

#include "eval/eval.h"
#include "model/tiny_config.h"
#include "tokenizer/tiny_vocab.h"

namespace k3::eval {
namespace {

struct TinyText {
  K3Config config;
  Tokenizer tokenizer;
};

TinyText tiny_text(TinyArch arch) {
  const Json doc = tiny_config_json(arch, TinySize::Tiny);
  K3Config config = parse_k3_config(parse_json(doc.dump(), "config.json"));
  const std::string dir = ::testing::TempDir() + "/k3_eval_tokenizer_" + std::to_string(static_cast<int>(arch));
  std::filesystem::create_directories(dir);
  write_tiny_tokenizer(dir, static_cast<uint32_t>(config.vocab_size) - Tokenizer::kNumSpecials);
  return {config, Tokenizer::load(dir)};
}

std::vector<int64_t> encode_reply(const Tokenizer& tok, const std::string& text) {
  const std::vector<uint32_t> ids = tok.encode(text, Specials::kAll);
  return {ids.begin(), ids.end()};
}

TEST(EvalChatReply, TrainedReplyTextIsTheDocumentedOne) {
  EXPECT_EQ(trained_reply(ChatFormat::kKimiK3, "42"),
            "<|close|>think<|sep|><|open|>response<|sep|>42<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>");
  EXPECT_EQ(trained_reply(ChatFormat::kKimiLinear, "42"), "42<|im_end|>");
}

TEST(EvalChatReply, TheTrainedReplyScoresCorrectInBothFormats) {
  for (const TinyArch arch : {TinyArch::KimiK3, TinyArch::KimiLinear}) {
    const TinyText m = tiny_text(arch);
    const ChatFormat format = chat_format_of(m.config);
    EXPECT_EQ(format, arch == TinyArch::KimiK3 ? ChatFormat::kKimiK3 : ChatFormat::kKimiLinear);
    for (const std::string answer : {"787", "2 34 50 83", "8umdsmpjys5o", "0"}) {
      const std::vector<int64_t> reply = encode_reply(m.tokenizer, trained_reply(format, answer));
      const ExampleResult x = score_reply(m.tokenizer, format, reply, answer);
      EXPECT_TRUE(x.correct) << answer << " parsed as '" << x.content << "' from " << x.text;
      EXPECT_EQ(x.text, trained_reply(format, answer));
      // The end marker is a stop id: a generated reply ends with it.
      const std::vector<int64_t> stops = stop_ids(m.tokenizer, format, m.config);
      EXPECT_NE(std::find(stops.begin(), stops.end(), reply.back()), stops.end());
      // Another answer, or the answer with a trailing space, is wrong.
      EXPECT_FALSE(score_reply(m.tokenizer, format, reply, answer + "1").correct);
      EXPECT_FALSE(score_reply(m.tokenizer, format, encode_reply(m.tokenizer, trained_reply(format, answer + " ")), answer).correct);
    }
  }
}

TEST(EvalChatReply, AnswerOutsideTheResponseChannelIsWrong) {
  const TinyText m = tiny_text(TinyArch::KimiK3);
  // The answer in the think channel only: content is empty.
  const std::string text = "787<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";
  const ExampleResult x = score_reply(m.tokenizer, ChatFormat::kKimiK3, encode_reply(m.tokenizer, text), "787");
  EXPECT_FALSE(x.correct);
  EXPECT_EQ(x.content, "");
}

TEST(EvalChatReply, PromptsEndWithTheGenerationPrompt) {
  const TinyText k3 = tiny_text(TinyArch::KimiK3);
  const std::vector<int64_t> p = prompt_ids(k3.tokenizer, ChatFormat::kKimiK3, "What is 1+2?");
  const std::string text = reply_text(k3.tokenizer, p);
  EXPECT_NE(text.find("What is 1+2?"), std::string::npos) << text;
  EXPECT_TRUE(text.ends_with("<|open|>think<|sep|>")) << text;  // thinking on
  EXPECT_NE(text.find("max"), std::string::npos) << text;        // effort max
  const TinyText kl = tiny_text(TinyArch::KimiLinear);
  const std::string kl_text = reply_text(kl.tokenizer, prompt_ids(kl.tokenizer, ChatFormat::kKimiLinear, "What is 1+2?"));
  EXPECT_TRUE(kl_text.ends_with("<|im_assistant|>assistant<|im_middle|>")) << kl_text;
}

TEST(EvalChatReply, StopIdsAndCap) {
  const TinyText k3 = tiny_text(TinyArch::KimiK3);
  const std::vector<int64_t> k3_stops = stop_ids(k3.tokenizer, ChatFormat::kKimiK3, k3.config);
  EXPECT_EQ(k3_stops, k3.config.tokens.eos);  // the tiny eos is <|end_of_msg|>
  EXPECT_EQ(k3_stops.front(), int64_t{k3.tokenizer.special_id("<|end_of_msg|>")});
  const TinyText kl = tiny_text(TinyArch::KimiLinear);
  const std::vector<int64_t> kl_stops = stop_ids(kl.tokenizer, ChatFormat::kKimiLinear, kl.config);
  EXPECT_EQ(kl_stops, (std::vector<int64_t>{kl.config.tokens.eos.front(), kl.tokenizer.special_id("<|im_end|>")}));
  EXPECT_EQ(reply_token_cap(k3.tokenizer, "12345"),
            32 + 2 * static_cast<int64_t>(k3.tokenizer.encode("12345", Specials::kNone).size()));
}

}  // namespace
}  // namespace k3::eval
