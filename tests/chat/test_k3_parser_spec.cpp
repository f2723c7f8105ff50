// The Kimi-K3 output parser against the tokenizer spec: one test per streaming case of §5.8, then
// the tolerances of §5.6/§5.7. Every case is also checked for the same result under every
// chunking (parser_harness.h) and, fed as spelled-out text, under every split of the text.
#include <gtest/gtest.h>

#include "chat/k3_format.h"
#include "parser_harness.h"
#include "tokenizer/utf8.h"

namespace k3::chat::test {
namespace {

MakeParser k3(bool thinking) {
  return [thinking] { return std::make_unique<K3OutputParser>(thinking); };
}

const std::vector<std::string>& names() {
  static const std::vector<std::string> n = K3OutputParser::markers();
  return n;
}

// Parses spelled-out output both ways (marker tokens, and text through feed() split at every
// byte), checks both chunking invariants and that they agree; returns the message.
ParsedMessage parse(const std::string& spelled, bool thinking, bool ended = false) {
  const Reply r = tokens_of(spelled, names());
  const Parsed whole = expect_chunking_invariant(k3(thinking), r, ended);
  EXPECT_EQ(run_text(k3(thinking), spelled, {}, ended), whole);
  for (size_t c = 1; c < spelled.size(); ++c) EXPECT_EQ(run_text(k3(thinking), spelled, {c}, ended), whole) << c;
  EXPECT_EQ(run_text(k3(thinking), spelled, every_offset(spelled.size()), ended), whole);
  K3OutputParser p(thinking);
  for (const Token& t : r) t.marker >= 0 ? p.marker(t.marker) : p.text(t.text);
  p.finish(ended);
  return p.message();
}

// Text-only cases (a partial marker name at the end): every split of the text gives one result.
ParsedMessage parse_text(const std::string& spelled, bool thinking) {
  const Parsed whole = run_text(k3(thinking), spelled, {});
  for (size_t c = 1; c < spelled.size(); ++c) EXPECT_EQ(run_text(k3(thinking), spelled, {c}), whole) << c;
  EXPECT_EQ(run_text(k3(thinking), spelled, every_offset(spelled.size())), whole);
  return parse_k3_output(spelled, thinking);
}

// The deltas of feeding one token at a time.
std::vector<ChatDelta> deltas(const Reply& r, bool thinking, bool ended = false) {
  K3OutputParser p(thinking);
  std::vector<ChatDelta> out;
  for (const Token& t : r) out.push_back(t.marker >= 0 ? p.marker(t.marker) : p.text(t.text));
  out.push_back(p.finish(ended));
  return out;
}

void expect_no_marker_text(const ParsedMessage& m) {
  const std::string all = m.to_json().dump();
  for (const char* bad : {"<|", "|>", "think", "response", "message"}) EXPECT_EQ(all.find(bad), std::string::npos) << all;
}

const std::string kExample1 =
    "The user asks a sum.<|close|>think<|sep|><|open|>response<|sep|>2 + 2 = 4.<|close|>response<|sep|>"
    "<|close|>message<|sep|><|end_of_msg|>";
const std::string kExample2 =
    "I should call get_weather.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
    "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Paris"
    "<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>2<|close|>argument<|sep|><|close|>call"
    "<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";

TEST(K3Parser, Spec58_1_GenerationStartsInsideThink) {
  const ParsedMessage m = parse(kExample1, true);
  EXPECT_EQ(m.reasoning_content, "The user asks a sum.");
  EXPECT_EQ(m.content, "2 + 2 = 4.");
  EXPECT_EQ(m.finish_reason, "stop");
  // The first deltas are reasoning; content starts only after close(think).
  const std::vector<ChatDelta> d = deltas({text("The user"), text(" asks a sum."), mark(kC), text("think"), mark(kS),
                                           mark(kO), text("response"), mark(kS), text("2 + 2")},
                                          true);
  EXPECT_EQ(d[0].reasoning_content, "The user");
  EXPECT_EQ(d[1].reasoning_content, " asks a sum.");
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(d[i].content, "") << i;
  EXPECT_EQ(d[8].content, "2 + 2");
  // Thinking off: the prompt opened response.
  const ParsedMessage off = parse("Rome.<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>", false);
  EXPECT_EQ(off.content, "Rome.");
  EXPECT_EQ(off.reasoning_content, std::nullopt);
}

TEST(K3Parser, Spec58_2_MarkerSpansSeveralTokens) {
  // <|close|>, "th", "ink", <|sep|>: the header's text is never emitted.
  const Reply r = {text("Hmm."), mark(kC), text("th"), text("ink"), mark(kS), mark(kO), text("resp"), text("onse"),
                   mark(kS),      text("OK"), mark(kC), text("mess"), text("age"), mark(kS)};
  for (const ChatDelta& d : deltas(r, true)) {
    EXPECT_EQ(d.reasoning_content.find("ink"), std::string::npos);
    EXPECT_EQ(d.content.find("onse"), std::string::npos);
  }
  const Parsed run = expect_chunking_invariant(k3(true), r);
  EXPECT_EQ(run.message["reasoning_content"], "Hmm.");
  EXPECT_EQ(run.message["content"], "OK");
  EXPECT_EQ(run.finish_reason, "stop");  // closing the message ends the reply
  // As text, a marker name split across chunks is held back until decided.
  K3OutputParser p(true);
  EXPECT_EQ(p.feed("Hmm.<|clo").reasoning_content, "Hmm.");
  EXPECT_TRUE(p.feed("se|>thi").empty());
  EXPECT_TRUE(p.feed("nk<|s").empty());
  EXPECT_TRUE(p.feed("ep|><|open|>response<|sep|>").empty());
  EXPECT_EQ(p.feed("<").content, "");
  EXPECT_EQ(p.feed("b>").content, "<b>");  // not a marker after all
}

TEST(K3Parser, Spec58_3_ToolCallDeltas) {
  const ParsedMessage m = parse(kExample2, true);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].id, "call_1");
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city": "Paris", "days": 2})");
  EXPECT_EQ(m.content, std::nullopt);
  EXPECT_EQ(m.finish_reason, "tool_calls");
  // By token: the call's first delta comes with the header's <|sep|>; a string value streams as
  // JSON-escaped fragments, a number only when its argument closes, "}" when the call closes.
  Reply r = tokens_of("x<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"", names());
  const size_t header = r.size();
  for (const Token& t : tokens_of("<|sep|><|open|>argument key=\"q\" type=\"string\"<|sep|>", names())) r.push_back(t);
  r.push_back(text("say \""));
  r.push_back(text("hi\""));
  for (const Token& t : tokens_of("<|close|>argument<|sep|><|open|>argument key=\"n\" type=\"number\"<|sep|>", names()))
    r.push_back(t);
  r.push_back(text("4"));
  r.push_back(text("2"));
  for (const Token& t : tokens_of("<|close|>argument<|sep|><|close|>call<|sep|>", names())) r.push_back(t);
  const std::vector<ChatDelta> d = deltas(r, true);
  ASSERT_EQ(d[header].tool_calls.size(), 1u);
  EXPECT_EQ(d[header].tool_calls[0].id, "call_1");
  EXPECT_EQ(d[header].tool_calls[0].name, "f");
  EXPECT_EQ(d[header].tool_calls[0].index, 0u);
  std::vector<std::string> fragments;
  for (const ChatDelta& x : d)
    for (const ToolCallDelta& c : x.tool_calls)
      if (!c.arguments.empty()) fragments.push_back(c.arguments);
  EXPECT_EQ(fragments, (std::vector<std::string>{"{\"q\": \"", "say \\\"", "hi\\\"", "\"", ", \"n\": ", "42", "}"}));
  // Zero-argument and parallel calls.
  const ParsedMessage two = parse(
      "<|open|>tools<|sep|><|open|>call tool=\"a\" index=\"1\"<|sep|><|close|>call<|sep|><|open|>call tool=\"b\" "
      "index=\"2\"<|sep|><|open|>argument key=\"k\" type=\"boolean\"<|sep|>true<|close|>argument<|sep|><|close|>call<|sep|>"
      "<|close|>tools<|sep|><|close|>message<|sep|>",
      false);
  ASSERT_EQ(two.tool_calls.size(), 2u);
  EXPECT_EQ(two.tool_calls[0].arguments, "{}");
  EXPECT_EQ(two.tool_calls[1].arguments, R"({"k": true})");
  EXPECT_EQ(two.tool_calls[1].id, "call_2");
}

TEST(K3Parser, Spec58_4_TextOnlyAtUtf8Boundaries) {
  // "é" = C3 A9 and "😀" = F0 9F 98 80 split across tokens.
  const Reply r = {text("caf\xC3"), text("\xA9 \xF0\x9F"), text("\x98"), text("\x80!"), mark(kC), text("think"), mark(kS)};
  const std::vector<ChatDelta> d = deltas(r, true);
  EXPECT_EQ(d[0].reasoning_content, "caf");
  EXPECT_EQ(d[1].reasoning_content, "\xC3\xA9 ");
  EXPECT_EQ(d[2].reasoning_content, "");
  EXPECT_EQ(d[3].reasoning_content, "\xF0\x9F\x98\x80!");
  EXPECT_EQ(expect_chunking_invariant(k3(true), r).message["reasoning_content"], "caf\xC3\xA9 \xF0\x9F\x98\x80!");
  // A sequence a marker (or the end) cuts off is one U+FFFD; invalid bytes too.
  const ParsedMessage m = parse("a\xE4\xB8<|close|>think<|sep|><|open|>response<|sep|>b\xFF" "c\xF0\x9F", true);
  EXPECT_EQ(m.reasoning_content, "a\xEF\xBF\xBD");
  EXPECT_EQ(m.content, "b\xEF\xBF\xBD" "c\xEF\xBF\xBD");
  for (const ChatDelta& x : deltas(tokens_of("\xC3<|open|>\xA9", names()), true))
    EXPECT_EQ(utf8::first_invalid(x.reasoning_content), std::string_view::npos);
}

TEST(K3Parser, Spec58_5_TruncationInsideACall) {
  // Cut inside a string argument: what was streamed stays, in the message too; "length".
  const ParsedMessage m = parse(
      "<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument "
      "key=\"city\" type=\"string\"<|sep|>Par",
      true);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city": "Par)");
  EXPECT_FALSE(m.tool_calls[0].complete);  // not to be run
  EXPECT_EQ(m.finish_reason, "length");
  // Cut inside a number argument (not streamed before it closes) or a header.
  const ParsedMessage n = parse(
      "<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|><|open|>argument key=\"a\" type=\"number\"<|sep|>12", false);
  EXPECT_EQ(n.tool_calls[0].arguments, "{\"a\": ");
  const ParsedMessage h = parse("<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|><|open|>argument key=\"a\"", false);
  EXPECT_EQ(h.tool_calls[0].arguments, "");
  EXPECT_EQ(h.finish_reason, "length");
  // A call whose header was cut is not a call.
  EXPECT_TRUE(parse("<|open|>tools<|sep|><|open|>call tool=\"f\"", false).tool_calls.empty());
}

TEST(K3Parser, Spec58_6_EmptyResponseWithToolsSendsNoContent) {
  const std::string out =
      "Need data.<|close|>think<|sep|>\n<|open|>response<|sep|><|close|>response<|sep|>\n\n<|open|>tools<|sep|>\n<|open|>"
      "call tool=\"f\" index=\"1\"<|sep|><|close|>call<|sep|>\n<|close|>tools<|sep|>\n<|close|>message<|sep|><|end_of_msg|>";
  const ParsedMessage m = parse(out, true);
  EXPECT_EQ(m.content, std::nullopt);
  EXPECT_EQ(m.finish_reason, "tool_calls");
  for (const ChatDelta& d : deltas(tokens_of(out, names()), true)) EXPECT_EQ(d.content, "");
}

TEST(K3Parser, Spec58_7_UnclosedChannels) {
  // Leaving think by opening response or tools directly.
  const ParsedMessage a = parse("Plan.<|open|>response<|sep|>Done.<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>", true);
  EXPECT_EQ(a.reasoning_content, "Plan.");
  EXPECT_EQ(a.content, "Done.");
  const ParsedMessage b = parse(
      "Plan.<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"x\" "
      "type=\"string\"<|sep|>1<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
      "<|end_of_msg|>",
      true);
  EXPECT_EQ(b.reasoning_content, "Plan.");
  ASSERT_EQ(b.tool_calls.size(), 1u);
  EXPECT_EQ(b.tool_calls[0].arguments, R"({"x": "1"})");
  EXPECT_EQ(b.finish_reason, "tool_calls");
  // A plain answer ending with close(message) or <|end_of_msg|> alone.
  for (const std::string end : {"<|close|>message<|sep|><|end_of_msg|>", "<|close|>message<|sep|>", "<|end_of_msg|>"}) {
    const ParsedMessage m = parse("Plan.<|close|>think<|sep|><|open|>response<|sep|>Answer." + end, true);
    EXPECT_EQ(m.content, "Answer.") << end;
    EXPECT_EQ(m.finish_reason, "stop") << end;
    expect_no_marker_text(m);
  }
  // The message ending inside a call closes it: a complete call.
  const ParsedMessage c = parse(
      "<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|><|open|>argument key=\"x\" type=\"number\"<|sep|>7<|end_of_msg|>", false);
  EXPECT_EQ(c.tool_calls[0].arguments, R"({"x": 7})");
  EXPECT_TRUE(c.tool_calls[0].complete);
  EXPECT_EQ(c.finish_reason, "tool_calls");
  // So does a stop token the parser was not given (the server's eos).
  const ParsedMessage s = parse("<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|><|open|>argument key=\"x\" type=\"string\"<|sep|>y",
                                false, /*ended=*/true);
  EXPECT_EQ(s.tool_calls[0].arguments, R"({"x": "y"})");
  EXPECT_TRUE(s.tool_calls[0].complete);
  EXPECT_EQ(s.finish_reason, "tool_calls");
  // Anything after the end is ignored.
  const ParsedMessage after = parse("A<|close|>message<|sep|>B<|open|>response<|sep|>C", false);
  EXPECT_EQ(after.content, "A");
  expect_no_marker_text(after);
}

// A seeded generator of tricky replies for §5.8.8; the exhaustive property test is
// test_parser_property.cpp.
TEST(K3Parser, Spec58_8_SameResultForEveryChunking) {
  const std::string out =
      "Grüße 😀 <b>x</b><|open|>response<|sep|>中文\n<|open|>em<|sep|>bold<|close|>em<|sep|> end"
      "<|open|>tools<|sep|><|open|>call tool=\"a&quot;b&amp;c\" index=\"1\"<|sep|><|open|>argument key=\"k&quot;\" "
      "type=\"object\"<|sep|>{\"x\": [1, 2.50]}<|open|>argument key=\"s\" type=\"string\"<|sep|>line\n\t\"q\"<|open|>"
      "call tool=\"g\"<|sep|><|open|>json type=\"object\"<|sep|>{\"raw\": true}<|close|>json<|sep|><|close|>message<|sep|>";
  const ParsedMessage m = parse(out, true);
  EXPECT_EQ(m.reasoning_content, "Grüße 😀 <b>x</b>");
  EXPECT_EQ(m.content, "中文\nbold end");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].name, "a\"b&c");
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"k\\\"\": {\"x\": [1, 2.5]}, \"s\": \"line\\n\\t\\\"q\\\"\"}");
  EXPECT_EQ(m.tool_calls[1].arguments, R"({"raw": true})");
  // Random coalescings of one-token-at-a-time.
  const Reply r = tokens_of(out, names());
  const Parsed whole = run_tokens(k3(true), r, {});
  const std::set<size_t> tokens = token_offsets(r);
  uint64_t state = 7;
  for (int round = 0; round < 50; ++round) {
    std::set<size_t> cuts;
    for (size_t c : tokens) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      if ((state >> 33) % 3 == 0) cuts.insert(c);
    }
    EXPECT_EQ(run_tokens(k3(true), r, cuts), whole) << round;
  }
}

// ---- tolerances of §5.6 / §5.7 ------------------------------------------------------------

TEST(K3Parser, ToolsWithoutDeclaredToolsAreReturnedAsCalls) {
  const ParsedMessage m = parse(
      "Sure.<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"search\" index=\"1\"<|sep|><|open|>argument "
      "key=\"q\" type=\"string\"<|sep|>cats<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>"
      "message<|sep|><|end_of_msg|>",
      false);
  EXPECT_EQ(m.content, "Sure.");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"q": "cats"})");
  expect_no_marker_text(ParsedMessage{m.reasoning_content, m.content, {}, ""});
}

TEST(K3Parser, TruncatedTailDropsPartialMarkers) {
  for (const std::string tail : {"<|clo", "<|close|>", "<|close|>think", "<|close|>think<|se", "<|open|>response", "<", "<|"}) {
    const ParsedMessage m = parse_text("Hmm" + tail, true);
    EXPECT_EQ(m.reasoning_content, "Hmm") << tail;
    EXPECT_EQ(m.finish_reason, "length");
  }
  EXPECT_EQ(parse_text("Hmm<|close|>think<|sep|><|open|>response<|sep|>Par<|clo", true).content, "Par");
  // Parsing ids, a partial name at the end is ordinary text.
  EXPECT_EQ(run_tokens(k3(true), {text("Hmm<|clo")}, {}).message["reasoning_content"], "Hmm<|clo");
}

TEST(K3Parser, WhitespaceBetweenBlocksIsDropped) {
  const ParsedMessage m = parse("R\n<|close|>think<|sep|>\n \n<|open|>response<|sep|>\n A \n<|close|>response<|sep|>\n"
                                "<|close|>message<|sep|>",
                                true);
  EXPECT_EQ(m.reasoning_content, "R\n");  // channel text is kept as written
  EXPECT_EQ(m.content, "\n A \n");
}

TEST(K3Parser, TextOutsideChannelsIsContent) {
  // A missing response block: text directly inside the message is content.
  const ParsedMessage m = parse("Why.<|close|>think<|sep|>\n Direct answer.\n<|close|>message<|sep|>", true);
  EXPECT_EQ(m.reasoning_content, "Why.");
  EXPECT_EQ(m.content, "\n Direct answer.\n");
  const ParsedMessage t = parse("<|close|>response<|sep|>  <|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|><|close|>call<|sep|>"
                                "<|close|>tools<|sep|>Done<|close|>message<|sep|>",
                                false);
  EXPECT_EQ(t.content, "Done");
  EXPECT_EQ(t.tool_calls.size(), 1u);
}

TEST(K3Parser, UnknownAndNestedTags) {
  // Unknown tags are transparent; a close matching nothing open is ignored; a nested channel
  // closes the open one.
  const ParsedMessage m = parse(
      "<|open|>note x=\"1\"<|sep|>a<|close|>note<|sep|>b<|close|>bogus<|sep|><|close|>think<|sep|>c<|open|>response<|sep|>"
      "d<|open|>response<|sep|>e<|close|>response<|sep|><|close|>message<|sep|>",
      false);
  EXPECT_EQ(m.content, "abcde");
  // An argument or json block outside a call is dropped; a call outside tools opens tools.
  const ParsedMessage n = parse(
      "x<|open|>argument key=\"k\" type=\"string\"<|sep|>lost<|close|>argument<|sep|>y<|open|>json<|sep|>{}<|close|>json"
      "<|sep|>z<|open|>call tool=\"f\"<|sep|><|open|>argument key=\"k\" type=\"null\"<|sep|>null<|close|>argument<|sep|>"
      "<|close|>call<|sep|><|close|>message<|sep|>",
      false);
  EXPECT_EQ(n.content, "xyz");
  ASSERT_EQ(n.tool_calls.size(), 1u);
  EXPECT_EQ(n.tool_calls[0].arguments, R"({"k": null})");
  // Spaced headers and a header ended by the next marker.
  const ParsedMessage s = parse("a<|close|> think <|sep|><|open|> response <|sep|>b<|close|>response<|open|>tools<|sep|>"
                                "<|close|>message<|sep|>",
                                true);
  EXPECT_EQ(s.reasoning_content, "a");
  EXPECT_EQ(s.content, "b");
  EXPECT_EQ(s.finish_reason, "stop");
}

TEST(K3Parser, UnterminatedCallsAndArguments) {
  // A call left open by the next call, an argument by the next argument, both by close(tools).
  const ParsedMessage m = parse(
      "<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|><|open|>argument key=\"a\" type=\"string\"<|sep|>1<|open|>argument "
      "key=\"b\" type=\"array\"<|sep|>[1,\"two\"]<|open|>call tool=\"g\"<|sep|><|open|>argument key=\"c\" "
      "type=\"number\"<|sep|>not json<|close|>tools<|sep|><|close|>message<|sep|>",
      false);
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"a": "1", "b": [1, "two"]})");
  EXPECT_EQ(m.tool_calls[1].arguments, R"({"c": "not json"})");
  EXPECT_EQ(m.finish_reason, "tool_calls");
  // A call without a tool name is dropped with its arguments; numbering skips it.
  const ParsedMessage d = parse("<|open|>tools<|sep|><|open|>call index=\"1\"<|sep|><|open|>argument key=\"a\" type=\"string\""
                                "<|sep|>x<|close|>argument<|sep|><|close|>call<|sep|><|open|>call tool=\"h\"<|sep|><|close|>"
                                "call<|sep|><|end_of_msg|>",
                                false);
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].id, "call_1");
  EXPECT_EQ(d.tool_calls[0].arguments, "{}");
  // A json block after arguments is ignored; an argument after a json block too.
  const ParsedMessage j = parse("<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|><|open|>json<|sep|>{\"a\":1}<|close|>json<|sep|>"
                                "<|open|>argument key=\"b\" type=\"string\"<|sep|>x<|close|>argument<|sep|><|close|>call<|sep|>"
                                "<|end_of_msg|>",
                                false);
  EXPECT_EQ(j.tool_calls[0].arguments, "{\"a\":1}");
}

TEST(K3Parser, AttributeEscapes) {
  const ParsedMessage m = parse(
      "<|open|>tools<|sep|><|open|>call tool=\"say&amp;quot;\" index=\"1\"<|sep|><|open|>argument key=\"a&quot;b&amp;c\" "
      "type=\"string\"<|sep|>v<|close|>argument<|sep|><|close|>call<|sep|><|end_of_msg|>",
      false);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "say&quot;");  // &quot; first, then &amp;: no double unescape
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"a\"b&c": "v"})");
}

TEST(K3Parser, MarkerNamesSpelledAsOrdinaryTokensAreText) {
  // Parsing ids: the model writing "<|close|>think<|sep|>" with ordinary tokens is reasoning text.
  const Reply r = {text("I will write <|close|>think<|sep|> literally."), mark(kC), text("think"), mark(kS),
                   mark(kO), text("response"), mark(kS), text("<|end_of_msg|> is the end marker."), mark(kE)};
  const Parsed run = expect_chunking_invariant(k3(true), r);
  EXPECT_EQ(run.message["reasoning_content"], "I will write <|close|>think<|sep|> literally.");
  EXPECT_EQ(run.message["content"], "<|end_of_msg|> is the end marker.");
  EXPECT_EQ(run.finish_reason, "stop");
}

}  // namespace
}  // namespace k3::chat::test
