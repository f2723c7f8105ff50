// Hostile chat requests: nesting limits (in the request and in JSON text inside it), error forms
// (file, line and column, no library tags), empty message lists, and rendering cost.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "chat/k3_format.h"
#include "chat/kimi_linear_format.h"
#include "error_of.h"
#include "io/json.h"

namespace k3::chat {
namespace {

using k3::test::error_of;

std::string nested(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  s += std::string(static_cast<size_t>(depth), '}');
  return s;
}

std::string with_tool_parameters(const std::string& parameters) {
  return R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":)" +
         parameters + "}}]}";
}

std::string with_arguments(const std::string& arguments) {
  return R"([{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":)" +
         arguments + "}}]}]";
}

TEST(ChatRequestLimits, DeepNestingIsAnErrorNamingTheField) {
  for (int depth : {300, 10000, 100000}) {
    const std::string tools = error_of([&] { parse_request(with_tool_parameters(nested(depth)), "req.json"); });
    EXPECT_EQ(tools.rfind("req.json: field 'tools[0].function.parameters.a.a.a.a.a.a.a.a...': invalid JSON: nesting deeper "
                          "than 256 levels", 0),
              0u)
        << tools;
    const std::string args = error_of([&] { parse_request(with_arguments(nested(depth)), "req.json"); });
    EXPECT_EQ(args.rfind("req.json: field '[1].tool_calls[0].function.arguments.a.a.a.a.a.a.a...': invalid JSON: "
                         "nesting deeper than 256 levels", 0),
              0u)
        << args;
  }
}

TEST(ChatRequestLimits, DeepJsonTextInsideAStringHasTheSameLimit) {
  const std::string text = nested(10000);
  const std::string request = with_arguments(Json(text).dump());
  EXPECT_EQ(error_of([&] { parse_request(request, "req.json"); }),
            "req.json: field 'messages[1].tool_calls[0].function.arguments.a.a.a.a.a.a.a.a.a.a.a.a...': invalid JSON: "
            "nesting deeper than 256 levels");
  // Repeated keys: the last value wins, in the first one's place (as Python's json.loads).
  EXPECT_EQ(dump_json(parse_request(with_arguments(R"({"b":1,"a":2,"b":3})")).messages[1].tool_calls[0].arguments,
                      JsonStyle::kCompact),
            R"({"b":3,"a":2})");
  // Within the limit it parses as an object; text that is not JSON stays a raw block.
  EXPECT_FALSE(parse_request(with_arguments(Json(nested(200)).dump())).messages[1].tool_calls[0].raw);
  EXPECT_TRUE(parse_request(with_arguments(R"("{not json")")).messages[1].tool_calls[0].raw);
}

TEST(ChatRequestLimits, ModelOutputTooDeepStaysText) {
  EXPECT_FALSE(parse_model_json(nested(10000)));
  EXPECT_TRUE(parse_model_json(nested(10)));
  const std::string output = "<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>"
                             "argument key=\"x\" type=\"object\"<|sep|>" + nested(5000) +
                             "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|end_of_msg|>";
  const ParsedMessage m = parse_k3_output(output, true);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"x\": " + Json(nested(5000)).dump() + "}");
}

TEST(ChatRequestLimits, SyntaxErrorsGiveFileLineAndColumnWithoutLibraryTags) {
  const std::string e = error_of([] { parse_request("{\"messages\": [\n  {\"role\": \"user\",, }]}", "req.json"); });
  EXPECT_EQ(e, "req.json: invalid JSON at line 2, column 19: syntax error while parsing object key - unexpected ','; "
               "expected string literal");
  EXPECT_EQ(e.find("json.exception"), std::string::npos);
  // Control bytes the library quotes never break the line.
  const std::string nul = error_of([] { parse_request(std::string("[\"a\0b\"]", 7), "req.json"); });
  EXPECT_EQ(nul.find('\0'), std::string::npos) << nul;
  EXPECT_EQ(nul.find('\n'), std::string::npos) << nul;
  // Field errors carry the file too.
  EXPECT_EQ(error_of([] { parse_request(R"([{"role":"dev\u0000\n"}])", "req.json"); }),
            "req.json: field 'messages[0].role': unknown role 'dev\\x00\\x0a' (expected system, user, assistant or tool)");
}

TEST(ChatRequestLimits, NoMessagesIsAnError) {
  for (const char* request : {"[]", R"({"messages":[]})", R"({"messages":[],"tools":[]})"})
    EXPECT_EQ(error_of([&] { parse_request(request, "req.json"); }),
              "req.json: field 'messages': expected at least one message")
        << request;
}

TEST(ChatRequestLimits, RenderingAtTheDepthLimitIsFast) {
  // 255 levels of parameters plus many keys per object: linear in the request's size.
  std::string wide = "{";
  for (int i = 0; i < 20000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(19999 - i) + "\":" + std::to_string(i);
  wide += "}";
  const Request request = parse_request(with_tool_parameters("[" + nested(250) + "," + wide + "]"));
  const auto start = std::chrono::steady_clock::now();
  const std::string k3 = join(render_k3(request));
  const std::string linear = join(render_kimi_linear(request));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);
  EXPECT_NE(k3.find("{\"k0\":19999,\"k1\":19998,\"k10\":19989"), std::string::npos);
  EXPECT_NE(linear.find(nested(250).substr(0, 40)), std::string::npos);
}

}  // namespace
}  // namespace k3::chat
