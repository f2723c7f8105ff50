// Per-choice output: stop strings across tokens, UTF-8 never split, finish reasons, logprob
// alignment, chat parsing with tool calls.
#include <gtest/gtest.h>

#include "api_test_util.h"
#include "server/api/choice_output.h"
#include "tokenizer/utf8.h"

namespace k3::server::test {
namespace {

ChoiceConfig completion_config(std::vector<std::string> stop = {}, int64_t max_tokens = 100, int top_logprobs = -1) {
  ChoiceConfig c;
  c.stop = std::move(stop);
  c.stop_token_ids = {eos()};
  c.max_tokens = max_tokens;
  c.top_logprobs = top_logprobs;
  return c;
}

TokenLogprobs fake_logprobs(int64_t id) { return {id, -0.5f - static_cast<float>(id % 7), {{id, -0.25f}, {97, -1.5f}}}; }

struct TextRun {
  std::vector<ChoiceUpdate> updates;
  std::string text;
};

TextRun feed_all(ChoiceOutput& out, const std::vector<int64_t>& ids, bool with_logprobs = false) {
  TextRun r;
  for (int64_t id : ids) {
    const TokenLogprobs lp = fake_logprobs(id);
    r.updates.push_back(out.feed(id, with_logprobs ? &lp : nullptr));
    r.text += r.updates.back().text;
    if (r.updates.back().finish_reason) break;
  }
  return r;
}

std::vector<int64_t> with_eos(std::vector<int64_t> ids) {
  ids.push_back(eos());
  return ids;
}

TEST(ChoiceOutput, PlainTextEndsAtEos) {
  ChoiceOutput out(tok(), completion_config());
  const TextRun r = feed_all(out, with_eos(ids_of(tok(), "hello world")));
  EXPECT_EQ(r.text, "hello world");
  EXPECT_EQ(out.text(), "hello world");
  EXPECT_EQ(out.finish_reason(), "stop");
  EXPECT_EQ(r.updates.back().finish_reason, "stop");
  EXPECT_EQ(out.completion_tokens(), static_cast<int64_t>(ids_of(tok(), "hello world").size()) + 1);
  EXPECT_TRUE(out.logprobs().is_null());
  EXPECT_THROW(out.feed(1), std::logic_error);
}

TEST(ChoiceOutput, StopStringAcrossTokensIsCutAndHeldBack) {
  ChoiceOutput out(tok(), completion_config({"STOP", "xyz"}));
  const std::vector<int64_t> ids = ids_of(tok(), "abc STSTOP never");
  std::vector<std::string> texts;
  for (int64_t id : ids) {
    texts.push_back(out.feed(id).text);
    if (out.finished()) break;
  }
  // "S", "T" wait; the next "S" decides the first "ST"; "STOP" completes at "P".
  EXPECT_EQ(texts, (std::vector<std::string>{"a", "b", "c", " ", "", "", "ST", "", "", ""}));
  std::string seen;
  for (const auto& t : texts) seen += t;
  EXPECT_EQ(seen, "abc ST");
  EXPECT_EQ(out.finish_reason(), "stop");
  EXPECT_EQ(out.text(), "abc ST");
}

TEST(ChoiceOutput, HeldBackPrefixIsReleasedWhenDecided) {
  ChoiceOutput out(tok(), completion_config({"xyz"}));
  std::vector<std::string> texts;
  for (int64_t id : ids_of(tok(), "axyaz")) texts.push_back(out.feed(id).text);
  EXPECT_EQ(texts, (std::vector<std::string>{"a", "", "", "xya", "z"}));
  // finish() from outside releases a held prefix.
  ChoiceOutput held(tok(), completion_config({"xyz"}));
  std::string all;
  for (int64_t id : ids_of(tok(), "axy")) all += held.feed(id).text;
  EXPECT_EQ(all, "a");
  const ChoiceUpdate last = held.finish("length");
  EXPECT_EQ(last.text, "xy");
  EXPECT_EQ(held.finish_reason(), "length");
  EXPECT_TRUE(held.finish("abort").empty());  // already finished
}

TEST(ChoiceOutput, MaxTokensIsLength) {
  ChoiceOutput out(tok(), completion_config({}, 3));
  const TextRun r = feed_all(out, ids_of(tok(), "abcdef"));
  EXPECT_EQ(r.text, "abc");
  EXPECT_EQ(out.finish_reason(), "length");
  EXPECT_EQ(out.completion_tokens(), 3);
  // The last token completing a stop string is "stop", not "length".
  ChoiceOutput stop(tok(), completion_config({"bc"}, 3));
  feed_all(stop, ids_of(tok(), "abc"));
  EXPECT_EQ(stop.finish_reason(), "stop");
  EXPECT_EQ(stop.text(), "a");
}

TEST(ChoiceOutput, Utf8IsNeverSplit) {
  const std::string text = "héllo 世界 🙂 done";
  const std::vector<int64_t> ids = ids_of(tok(), text);
  ASSERT_GT(ids.size(), 20u);  // byte tokens: multi-byte characters span several
  ChoiceOutput out(tok(), completion_config({"界 X"}));
  std::string all;
  for (int64_t id : ids) {
    const ChoiceUpdate u = out.feed(id);
    EXPECT_EQ(utf8::replace_invalid(u.text), u.text);
    all += u.text;
  }
  all += out.finish("length").text;
  EXPECT_EQ(all, text);
  // A stop string starting inside a multi-byte character's tokens.
  ChoiceOutput cut(tok(), completion_config({"世"}));
  std::string got;
  for (int64_t id : ids) {
    got += cut.feed(id).text;
    if (cut.finished()) break;
  }
  EXPECT_EQ(got, "héllo ");
}

TEST(ChoiceOutput, CompletionLogprobsAlignWithText) {
  ChoiceOutput out(tok(), completion_config({"cd"}, 100, 1));
  const std::vector<int64_t> ids = ids_of(tok(), "abcde");
  const TextRun r = feed_all(out, ids, true);
  EXPECT_EQ(out.text(), "ab");
  const chat::Json lp = out.logprobs();
  EXPECT_EQ(lp["tokens"], chat::Json::array({"a", "b"}));  // c and d lie inside the stop string
  EXPECT_EQ(lp["text_offset"], chat::Json::array({0, 1}));
  EXPECT_EQ(lp["token_logprobs"][0], static_cast<double>(-0.5f - static_cast<float>(ids[0] % 7)));
  EXPECT_EQ(lp["top_logprobs"][0], (chat::Json{{"a", -0.25}, {tok().token_bytes(97), -1.5}}));
  // Streamed: each update carries the entries of the text it releases ("c" waits, then is dropped).
  size_t streamed = 0;
  for (const auto& u : r.updates)
    if (!u.logprobs.is_null()) streamed += u.logprobs["tokens"].size();
  EXPECT_EQ(streamed, 2u);
  EXPECT_EQ(r.updates[0].logprobs["tokens"], chat::Json::array({"a"}));
  EXPECT_EQ(r.updates[1].logprobs["tokens"], chat::Json::array({"b"}));
  EXPECT_TRUE(r.updates[2].logprobs.is_null());
  // A two-byte character: the first byte's token has no text of its own; both start at its offset.
  ChoiceOutput two(tok(), completion_config({}, 100, 0));
  feed_all(two, with_eos(ids_of(tok(), "aé")), true);
  EXPECT_EQ(two.logprobs()["text_offset"], chat::Json::array({0, 1, 1}));
  EXPECT_EQ(two.logprobs()["tokens"].size(), 3u);  // eos has no entry
  EXPECT_THROW(ChoiceOutput(tok(), completion_config({}, 100, 0)).feed(1), std::logic_error);
}

ChoiceConfig chat_config(OutputKind kind, int top_logprobs = -1) {
  ChoiceConfig c = completion_config({}, 1000, top_logprobs);
  c.kind = kind;
  c.call_id_prefix = "call_t_";
  return c;
}

struct ChatRun {
  std::string reasoning, content;
  std::vector<chat::ToolCallDelta> calls;
  std::vector<ChoiceUpdate> updates;
};

ChatRun feed_chat(ChoiceOutput& out, const std::string& model_text, bool end_with_eos = true) {
  ChatRun r;
  std::vector<int64_t> ids = ids_of(tok(), model_text);
  if (end_with_eos) ids.push_back(eos());
  for (int64_t id : ids) {
    const TokenLogprobs lp = fake_logprobs(id);
    r.updates.push_back(out.feed(id, &lp));
    const chat::ChatDelta& d = r.updates.back().delta;
    r.reasoning += d.reasoning_content;
    r.content += d.content;
    r.calls.insert(r.calls.end(), d.tool_calls.begin(), d.tool_calls.end());
    if (out.finished()) break;
  }
  if (!out.finished()) r.updates.push_back(out.finish("length"));
  return r;
}

TEST(ChoiceOutput, ChatK3ReasoningAndContent) {
  ChoiceOutput out(tok(), chat_config(OutputKind::kChatK3, 0));
  const ChatRun r = feed_chat(out, "Let me think.<|close|>think<|sep|><|open|>response<|sep|>Héllo!<|close|>response<|sep|>"
                                   "<|close|>message<|sep|>");
  EXPECT_EQ(r.reasoning, "Let me think.");
  EXPECT_EQ(r.content, "Héllo!");
  EXPECT_EQ(out.reasoning_tokens(), static_cast<int64_t>(ids_of(tok(), "Let me think.").size()));
  EXPECT_EQ(out.finish_reason(), "stop");
  EXPECT_EQ(out.message().content, "Héllo!");
  EXPECT_EQ(out.message().reasoning_content, "Let me think.");
  EXPECT_EQ(out.message().finish_reason, "stop");
  // Chat logprobs: one entry per token before eos, markers by name, raw bytes.
  const chat::Json lp = out.logprobs();
  const size_t n = ids_of(tok(), "Let me think.<|close|>think<|sep|><|open|>response<|sep|>Héllo!<|close|>response<|sep|>"
                                 "<|close|>message<|sep|>").size();
  ASSERT_EQ(lp["content"].size(), n);
  EXPECT_EQ(lp["content"][0]["token"], "L");
  EXPECT_EQ(lp["content"][0]["bytes"], chat::Json::array({76}));
  EXPECT_EQ(lp["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp["content"][13]["token"], "<|close|>");
  // "é" is two byte tokens: each entry has its own byte and a replacement-character token string.
  bool found = false;
  for (const auto& entry : lp["content"])
    if (entry["bytes"] == chat::Json::array({0xC3})) found = entry["token"] == "\xEF\xBF\xBD";
  EXPECT_TRUE(found);
}

TEST(ChoiceOutput, ChatK3ToolCallDeltas) {
  ChoiceOutput out(tok(), chat_config(OutputKind::kChatK3));
  const ChatRun r = feed_chat(
      out,
      "I should call get_weather.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
      "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Paris"
      "<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>2<|close|>argument<|sep|><|close|>call"
      "<|sep|><|close|>tools<|sep|><|close|>message<|sep|>");
  EXPECT_EQ(out.finish_reason(), "tool_calls");
  EXPECT_EQ(r.reasoning, "I should call get_weather.");
  EXPECT_EQ(r.content, "");
  ASSERT_FALSE(r.calls.empty());
  EXPECT_EQ(r.calls[0].id, "call_t_1");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  std::string arguments;
  for (const auto& c : r.calls) {
    EXPECT_EQ(c.index, 0u);
    arguments += c.arguments;
  }
  ASSERT_EQ(out.message().tool_calls.size(), 1u);
  EXPECT_EQ(arguments, out.message().tool_calls[0].arguments);
  EXPECT_EQ(chat::Json::parse(arguments), (chat::Json{{"city", "Paris"}, {"days", 2}}));
}

TEST(ChoiceOutput, ChatStopStringAppliesToTheRawOutput) {
  ChoiceConfig c = chat_config(OutputKind::kChatK3);
  c.thinking = false;
  c.stop = {"END"};
  ChoiceOutput out(tok(), c);
  const ChatRun r = feed_chat(out, "<|open|>response<|sep|>one two END three", false);
  EXPECT_EQ(r.content, "one two ");
  EXPECT_EQ(out.finish_reason(), "stop");
  EXPECT_EQ(out.message().content, "one two ");
}

TEST(ChoiceOutput, ChatKimiLinear) {
  ChoiceOutput out(tok(), chat_config(OutputKind::kChatKimiLinear));
  const ChatRun r = feed_chat(out, "Hi there");
  EXPECT_EQ(r.content, "Hi there");
  EXPECT_EQ(out.finish_reason(), "stop");
  ChoiceOutput calls(tok(), chat_config(OutputKind::kChatKimiLinear));
  const ChatRun t = feed_chat(calls, "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>"
                                     "{\"a\": 1}<|tool_call_end|><|tool_calls_section_end|>");
  EXPECT_EQ(calls.finish_reason(), "tool_calls");
  ASSERT_FALSE(t.calls.empty());
  EXPECT_EQ(t.calls[0].id, "functions.f:0");
  EXPECT_EQ(t.calls[0].name, "f");
  // Cut by max_tokens: "length" even with text pending in the parser.
  ChoiceConfig short_config = chat_config(OutputKind::kChatKimiLinear);
  short_config.max_tokens = 4;
  ChoiceOutput cut(tok(), short_config);
  const ChatRun s = feed_chat(cut, "abcdefgh");
  EXPECT_EQ(s.content, "abcd");
  EXPECT_EQ(cut.finish_reason(), "length");
}

// skip_special_tokens (default): completions text has no added token at all, the K3 markers
// included; chat text keeps only what its parser consumes. false keeps every token.
TEST(ChoiceOutput, SpecialTokensAreSkippedUnlessAskedFor) {
  const std::string model_text = "a<|open|>b<|im_user|>c[BOS]";
  ChoiceOutput skipped(tok(), completion_config());
  EXPECT_EQ(feed_all(skipped, with_eos(ids_of(tok(), model_text))).text, "abc");
  EXPECT_EQ(skipped.text(), "abc");
  ChoiceConfig keep = completion_config();
  keep.skip_special = false;
  ChoiceOutput kept(tok(), keep);
  EXPECT_EQ(feed_all(kept, with_eos(ids_of(tok(), model_text))).text, model_text);

  const std::string reply = "<|close|>think<|sep|><|open|>response<|sep|>4<|im_assistant|>6<|close|>response<|sep|>"
                            "<|close|>message<|sep|>";
  ChoiceOutput chat(tok(), chat_config(OutputKind::kChatK3));
  EXPECT_EQ(feed_chat(chat, reply).content, "46");
  EXPECT_EQ(chat.message().content, "46");
  ChoiceConfig raw = chat_config(OutputKind::kChatK3);
  raw.skip_special = false;
  ChoiceOutput raw_chat(tok(), raw);
  EXPECT_EQ(feed_chat(raw_chat, reply).content, "4<|im_assistant|>6");
  ChoiceOutput linear(tok(), chat_config(OutputKind::kChatKimiLinear));
  EXPECT_EQ(feed_chat(linear, "4<|open|>6<|im_end|>ignored").content, "46");
  EXPECT_EQ(linear.finish_reason(), "stop");
}

}  // namespace
}  // namespace k3::server::test
