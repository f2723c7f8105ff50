// Chat choices parse the generated ids (tokenizer spec §5.7/§5.8): marker ids are structure, a
// marker name spelled with ordinary tokens is text; a stop token closes what is open; held-back
// text (a possible stop string) only coalesces what the parser gets, never changes the result.
#include <gtest/gtest.h>

#include "api_test_util.h"
#include "server/api/choice_output.h"

namespace k3::server::test {
namespace {

ChoiceConfig k3_config(std::vector<std::string> stop = {}) {
  ChoiceConfig c;
  c.kind = OutputKind::kChatK3;
  c.stop = std::move(stop);
  c.stop_token_ids = {eos()};
  c.max_tokens = 1000;
  return c;
}

struct Result {
  chat::ParsedMessage joined;  // the deltas as a client joins them
  chat::Json message;
  std::string finish_reason;
};

Result run(ChoiceOutput& out, const std::vector<int64_t>& ids) {
  Result r;
  for (int64_t id : ids) {
    r.joined.add(out.feed(id).delta);
    if (out.finished()) break;
  }
  if (!out.finished()) r.joined.add(out.finish("length").delta);
  r.message = out.message().to_json();
  r.finish_reason = out.finish_reason();
  return r;
}

std::vector<int64_t> cat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
std::vector<int64_t> plain(std::string_view text) {  // marker names stay ordinary tokens
  const std::vector<uint32_t> ids = tok().encode(text, Specials::kNone);
  return {ids.begin(), ids.end()};
}

TEST(ChoiceOutputParsing, MarkerNamesSpelledWithOrdinaryTokensAreText) {
  const std::vector<int64_t> ids = cat(cat(plain("See <|close|>think<|sep|> here."), ids_of(tok(), "<|close|>think<|sep|><|open|>response<|sep|>")),
                                       cat(plain("Use <|end_of_msg|>."), {eos()}));
  ChoiceOutput out(tok(), k3_config());
  const Result r = run(out, ids);
  EXPECT_EQ(r.message["reasoning_content"], "See <|close|>think<|sep|> here.");
  EXPECT_EQ(r.message["content"], "Use <|end_of_msg|>.");
  EXPECT_EQ(r.joined.to_json(), r.message);
  EXPECT_EQ(r.finish_reason, "stop");
}

TEST(ChoiceOutputParsing, HeldBackStopPrefixesDoNotChangeTheResult) {
  const std::string reply =
      "Plan.<|open|>response<|sep|>Sure: z|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" "
      "index=\"1\"<|sep|><|open|>argument key=\"q\" type=\"string\"<|sep|>x|>y<|close|>argument<|sep|><|close|>call<|sep|>"
      "<|close|>tools<|sep|><|close|>message<|sep|>";
  ChoiceOutput plain_out(tok(), k3_config());
  const Result expected = run(plain_out, cat(ids_of(tok(), reply), {eos()}));
  EXPECT_EQ(expected.message["content"], "Sure: z|>");
  EXPECT_EQ(expected.finish_reason, "tool_calls");
  // Stop strings that never match but hold text back, some of it inside marker names.
  for (const std::vector<std::string>& stop : std::vector<std::vector<std::string>>{
           {"|>Q"}, {"<|close|>X"}, {"sep|>!", "z|>!"}, {"ponse<|sep|>?"}, {"Plan.<|open|>respond"}}) {
    ChoiceOutput out(tok(), k3_config(stop));
    const Result r = run(out, cat(ids_of(tok(), reply), {eos()}));
    EXPECT_EQ(r.message, expected.message) << stop[0];
    EXPECT_EQ(r.joined.to_json(), expected.message) << stop[0];
    EXPECT_EQ(r.finish_reason, "tool_calls") << stop[0];
  }
}

TEST(ChoiceOutputParsing, StopTokenClosesWhatIsOpen) {
  // eos inside a call's argument: the call completes; "tool_calls".
  ChoiceOutput out(tok(), k3_config());
  const Result r = run(out, cat(ids_of(tok(), "<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|>"
                                              "<|open|>argument key=\"n\" type=\"number\"<|sep|>5"),
                                {eos()}));
  EXPECT_EQ(r.message["tool_calls"][0]["function"]["arguments"], R"({"n": 5})");
  EXPECT_EQ(r.joined.to_json(), r.message);
  EXPECT_EQ(r.finish_reason, "tool_calls");
  // A limit inside a call: the call stays as streamed, "length".
  ChoiceConfig c = k3_config();
  const std::vector<int64_t> cut = ids_of(tok(), "<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|>"
                                                 "<|open|>argument key=\"s\" type=\"string\"<|sep|>abc");
  c.max_tokens = static_cast<int64_t>(cut.size());
  ChoiceOutput limited(tok(), c);
  const Result l = run(limited, cat(cut, {eos()}));
  EXPECT_EQ(l.message["tool_calls"][0]["function"]["arguments"], R"({"s": "abc)");
  EXPECT_EQ(l.joined.to_json(), l.message);
  EXPECT_EQ(l.finish_reason, "length");
  // A stop string cutting a marker name: the cut marker never reaches the parser.
  ChoiceOutput stopped(tok(), k3_config({"sep|>"}));
  const Result s = run(stopped, cat(ids_of(tok(), "Hm<|close|>think<|sep|>answer"), {eos()}));
  EXPECT_EQ(s.message["reasoning_content"], "Hm");
  EXPECT_EQ(s.message["content"], nullptr);
  EXPECT_EQ(s.finish_reason, "stop");
}

}  // namespace
}  // namespace k3::server::test
