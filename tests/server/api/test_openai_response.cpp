// Response bodies and stream chunks, exactly.
#include <gtest/gtest.h>

#include "api_test_util.h"
#include "server/api/openai_response.h"

namespace k3::server::test {
namespace {

ChoiceOutput finished(OutputKind kind, const std::string& model_text, int top_logprobs = -1) {
  ChoiceConfig c;
  c.kind = kind;
  c.thinking = false;
  c.call_id_prefix = "call_x_";
  c.stop_token_ids = {eos()};
  c.max_tokens = 100;
  c.top_logprobs = top_logprobs;
  ChoiceOutput out(tok(), c);
  std::vector<int64_t> ids = ids_of(tok(), model_text);
  ids.push_back(eos());
  for (int64_t id : ids) {
    const TokenLogprobs lp{id, -0.5f, {}};
    out.feed(id, &lp);
  }
  return out;
}

const ResponseHead kHead{"cmpl-1", "tiny", 1700000000, false};

TEST(OpenAiResponse, Completion) {
  const ChoiceOutput a = finished(OutputKind::kCompletion, "hi"), b = finished(OutputKind::kCompletion, "yo", 0);
  const std::vector<const ChoiceOutput*> choices{&a, &b};
  EXPECT_EQ(usage_of(4, choices).completion_tokens, 6);
  EXPECT_EQ(completion_response(kHead, choices, usage_of(4, choices)),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny","choices":[)"
            R"({"index":0,"text":"hi","logprobs":null,"finish_reason":"stop"},)"
            R"({"index":1,"text":"yo","logprobs":{"tokens":["y","o"],"token_logprobs":[-0.5,-0.5],)"
            R"("top_logprobs":[{},{}],"text_offset":[0,1]},"finish_reason":"stop"}],)"
            R"("usage":{"prompt_tokens":4,"completion_tokens":6,"total_tokens":10}})");
}

TEST(OpenAiResponse, Chat) {
  const ChoiceOutput a = finished(OutputKind::kChatK3, "<|open|>response<|sep|>Hello<|close|>response<|sep|>");
  const ChoiceOutput b = finished(
      OutputKind::kChatK3,
      "<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"x\" type=\"string\"<|sep|>1"
      "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>");
  const ResponseHead head{"chatcmpl-1", "tiny", 5, false};
  EXPECT_EQ(chat_response(head, {&a, &b}, Usage{3, 9}),
            R"({"id":"chatcmpl-1","object":"chat.completion","created":5,"model":"tiny","choices":[)"
            R"({"index":0,"message":{"role":"assistant","content":"Hello"},"logprobs":null,"finish_reason":"stop"},)"
            R"({"index":1,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_x_1","type":"function",)"
            R"("function":{"name":"f","arguments":"{\"x\": \"1\"}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],)"
            R"("usage":{"prompt_tokens":3,"completion_tokens":9,"total_tokens":12}})");
}

TEST(OpenAiResponse, ChatChunks) {
  ResponseHead head{"chatcmpl-2", "tiny", 7, true};
  EXPECT_EQ(chat_role_chunk(head, 1),
            R"(data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":7,"model":"tiny","choices":[)"
            R"({"index":1,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null})"
            "\n\n");
  head.include_usage = false;
  ChoiceUpdate u;
  EXPECT_EQ(chat_chunk(head, 0, u), "");
  u.delta.reasoning_content = "r";
  u.delta.content = "c";
  u.delta.tool_calls = {{0, "call_1", "f", "{\"a\""}, {0, "", "", ": 1}"}};
  EXPECT_EQ(chat_chunk(head, 0, u),
            R"(data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":7,"model":"tiny","choices":[)"
            R"({"index":0,"delta":{"reasoning_content":"r","content":"c","tool_calls":[)"
            R"({"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\""}},)"
            R"({"index":0,"function":{"arguments":": 1}"}}]},"logprobs":null,"finish_reason":null}]})"
            "\n\n");
  ChoiceUpdate last;
  last.finish_reason = "tool_calls";
  EXPECT_EQ(chat_chunk(head, 2, last),
            R"(data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":7,"model":"tiny","choices":[)"
            R"({"index":2,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]})"
            "\n\n");
  EXPECT_EQ(usage_chunk(head, true, Usage{2, 3}),
            R"(data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":7,"model":"tiny","choices":[],)"
            R"("usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}})"
            "\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(OpenAiResponse, CompletionChunks) {
  ChoiceUpdate u;
  EXPECT_EQ(completion_chunk(kHead, 0, u), "");
  u.text = "é";
  u.finish_reason = "length";
  EXPECT_EQ(completion_chunk(kHead, 0, u),
            "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"tiny\",\"choices\":["
            "{\"index\":0,\"text\":\"é\",\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n");
  EXPECT_EQ(usage_chunk(kHead, false, Usage{1, 1}),
            R"(data: {"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny","choices":[],)"
            R"("usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}})"
            "\n\n");
}

TEST(OpenAiResponse, ModelsAndIds) {
  EXPECT_EQ(models_response("tiny", 9, 4096),
            R"({"object":"list","data":[{"id":"tiny","object":"model","created":9,"owned_by":"k3","max_model_len":4096}]})");
  const std::string id = new_response_id("chatcmpl-");
  EXPECT_EQ(id.size(), 9u + 24u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 9), std::string::npos);
  EXPECT_NE(id, new_response_id("chatcmpl-"));
  EXPECT_GT(unix_seconds_now(), 1700000000);
}

}  // namespace
}  // namespace k3::server::test
