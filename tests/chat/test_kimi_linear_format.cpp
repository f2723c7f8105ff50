// Kimi-Linear (K2 family) rendering and parsing, tokenizer spec §4 and §6.
#include <gtest/gtest.h>

#include "chat/kimi_linear_format.h"

namespace k3::chat {
namespace {

TEST(KimiLinearRender, SpecExample) {
  EXPECT_EQ(join(render_kimi_linear(parse_request(R"([{"role":"system","content":"You are a helpful assistant."},
                                                      {"role":"user","content":"What is 2+2?"}])"))),
            "<|im_system|>system<|im_middle|>You are a helpful assistant.<|im_end|><|im_user|>user<|im_middle|>What is "
            "2+2?<|im_end|><|im_assistant|>assistant<|im_middle|>");
}

TEST(KimiLinearRender, DefaultSystemToolsCallsAndResults) {
  const auto segments = render_kimi_linear(parse_request(R"({"tools":[{"type":"function","function":{"name":"f"}}],"messages":[
      {"role":"user","content":"go"},
      {"role":"assistant","content":"ok","tool_calls":[{"id":"functions.f:0","function":{"name":"f","arguments":{"b":1,"a":"x"}}}]},
      {"role":"tool","tool_call_id":"functions.f:0","content":"done"}]})"));
  EXPECT_EQ(join(segments),
            "<|im_system|>tool_declare<|im_middle|>[{\"function\":{\"name\":\"f\"},\"type\":\"function\"}]<|im_end|>"
            "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|><|im_user|>user<|im_middle|>go<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>ok<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
            "<|tool_call_argument_begin|>{\"a\": \"x\", \"b\": 1}<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
            "<|im_system|>tool<|im_middle|>## Return of functions.f:0\ndone<|im_end|><|im_assistant|>assistant<|im_middle|>");
  EXPECT_EQ(segments.front(), (Segment{"<|im_system|>", true}));
}

TEST(KimiLinearParse, ContentAndToolCallsSplitAtEveryByte) {
  const std::string out =
      "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
      "{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>";
  const ParsedMessage whole = parse_kimi_linear_output(out);
  EXPECT_EQ(whole.content, "Let me check.");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].id, "functions.get_weather:0");
  EXPECT_EQ(whole.tool_calls[0].name, "get_weather");
  EXPECT_EQ(whole.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(whole.finish_reason, "tool_calls");
  for (size_t cut = 0; cut <= out.size(); ++cut) {
    KimiLinearOutputParser p;
    std::string content = p.feed(out.substr(0, cut)).content;
    content += p.feed(out.substr(cut)).content;
    content += p.finish().content;
    EXPECT_EQ(p.message().to_json(), whole.to_json()) << cut;
    EXPECT_EQ(content, "Let me check.");
  }
  EXPECT_EQ(parse_kimi_linear_output("2 + 2 = 4.<|im_end|>").content, "2 + 2 = 4.");
  EXPECT_EQ(parse_kimi_linear_output("2 + 2 = 4.<|im_end|>").finish_reason, "stop");
}

}  // namespace
}  // namespace k3::chat
