// Request parsing: defaults, every refused field (status, param, code), chat rendering, tokenize.
#include <gtest/gtest.h>

#include "api_test_util.h"
#include "chat/k3_format.h"
#include "chat/segments.h"

namespace k3::server::test {
namespace {

const char* kUser = R"("messages":[{"role":"user","content":"hi"}])";

CompletionRequest completion(const std::string& fields) {
  return parse_completion_request("{\"prompt\":\"hello\"" + (fields.empty() ? "" : "," + fields) + "}", tiny_api().ctx);
}
ChatCompletionRequest chat(const std::string& fields) {
  return parse_chat_request(std::string("{") + kUser + (fields.empty() ? "" : "," + fields) + "}", tiny_api().ctx);
}

TEST(CompletionRequest, Defaults) {
  const CompletionRequest r = completion("");
  EXPECT_EQ(r.gen.prompt, ids_of(tiny_api().tokenizer, "hello"));
  EXPECT_EQ(r.gen.max_tokens, kMaxContext - 5);
  EXPECT_FALSE(r.gen.sampling.greedy);
  EXPECT_EQ(r.gen.sampling.temperature, 1.0);
  EXPECT_EQ(r.gen.stop_token_ids, tiny_api().config.tokens.eos);
  EXPECT_EQ(r.gen.top_logprobs, -1);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.skip_special_tokens);
  EXPECT_EQ(r.model, "tiny");
}

TEST(CompletionRequest, AllFields) {
  const CompletionRequest r = completion(
      R"("model":"tiny","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,"seed":-1,"n":3,)"
      R"("stop":["x","yz"],"stop_token_ids":[5,258],"presence_penalty":0.5,"frequency_penalty":-1,"logprobs":2,)"
      R"("stream":true,"stream_options":{"include_usage":true},"user":"u","echo":false,"best_of":3,"logit_bias":{},)"
      R"("skip_special_tokens":false,"unknown_field":{"a":1})");
  EXPECT_EQ(r.gen.max_tokens, 7);
  EXPECT_EQ(r.gen.sampling.temperature, 0.5);
  EXPECT_EQ(r.gen.sampling.top_p, 0.9);
  EXPECT_EQ(r.gen.sampling.top_k, 40);
  EXPECT_EQ(r.gen.sampling.min_p, 0.05);
  EXPECT_EQ(r.gen.sampling.seed, ~uint64_t{0});
  EXPECT_EQ(r.gen.sampling.presence_penalty, 0.5);
  EXPECT_EQ(r.gen.sampling.frequency_penalty, -1);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(r.gen.stop_token_ids, (std::vector<int64_t>{5, 258}));  // eos 258 not repeated
  EXPECT_EQ(r.gen.top_logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_FALSE(r.skip_special_tokens);
  EXPECT_EQ(choice_params(r.gen, 2).sampling.seed, 1u);
  EXPECT_EQ(completion(R"("stop":"s","ignore_eos":true)").gen.stop_token_ids, std::vector<int64_t>{});
  EXPECT_EQ(completion(R"("top_k":-1)").gen.sampling.top_k, 0);
  const CompletionRequest greedy = completion(R"("temperature":0,"n":2)");
  EXPECT_TRUE(greedy.gen.sampling.greedy);
  EXPECT_EQ(greedy.n, 2);
}

TEST(CompletionRequest, PromptForms) {
  const auto& api = tiny_api();
  EXPECT_EQ(parse_completion_request(R"({"prompt":[1,2,300]})", api.ctx).gen.prompt, (std::vector<int64_t>{1, 2, 300}));
  // Special-token names in a text prompt are the markers.
  EXPECT_EQ(parse_completion_request(R"({"prompt":"<|open|>a"})", api.ctx).gen.prompt.front(),
            api.tokenizer.special_id("<|open|>"));
  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& c : {Case{R"({"prompt":["a","b"]})", "prompt"}, Case{R"({"prompt":[[1],[2]]})", "prompt"},
                        Case{R"({"prompt":[1,512]})", "prompt[1]"}, Case{R"({"prompt":[1,-1]})", "prompt[1]"},
                        Case{R"({"prompt":""})", "prompt"}, Case{R"({"prompt":[]})", "prompt"}, Case{R"({})", "prompt"},
                        Case{R"({"prompt":3})", "prompt"}}) {
    const ApiError e = api_error_of([&] { parse_completion_request(c.body, api.ctx); });
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body;
  }
}

TEST(CompletionRequest, RefusesBadFields) {
  expect_refused([](const std::string& f) { completion(f); },
                 {{R"("model":"gpt-4")", "model", 404, "model_not_found"},
                  {R"("model":3)", "model"},
                  {R"("temperature":2.5)", "temperature"},
                  {R"("temperature":"hot")", "temperature"},
                  {R"("top_p":0)", "top_p"},
                  {R"("top_p":1.5)", "top_p"},
                  {R"("top_k":-2)", "top_k"},
                  {R"("top_k":1.5)", "top_k"},
                  {R"("min_p":1.1)", "min_p"},
                  {R"("presence_penalty":2.5)", "presence_penalty"},
                  {R"("frequency_penalty":-2.5)", "frequency_penalty"},
                  {R"("seed":"x")", "seed"},
                  {R"("seed":18446744073709551615)", "seed"},
                  {R"("n":0)", "n"},
                  {R"("n":17)", "n"},
                  {R"("stop":"")", "stop"},
                  {R"("stop":["a","b","c","d","e"])", "stop"},
                  {R"("stop":[1])", "stop"},
                  {R"("stop":7)", "stop"},
                  {R"("stop_token_ids":[512])", "stop_token_ids[0]"},
                  {R"("stop_token_ids":3)", "stop_token_ids"},
                  {R"("ignore_eos":1)", "ignore_eos"},
                  {R"("skip_special_tokens":"no")", "skip_special_tokens"},
                  {R"("logprobs":6)", "logprobs"},
                  {R"("logprobs":true)", "logprobs"},
                  {R"("max_tokens":0)", "max_tokens"},
                  {R"("max_tokens":2.0)", "max_tokens"},
                  {"\"max_tokens\":" + std::to_string(kMaxContext - 4), "max_tokens", 400, "context_length_exceeded"},
                  {R"("stream":"yes")", "stream"},
                  {R"("stream_options":{"include_usage":true})", "stream_options"},
                  {R"("stream":true,"stream_options":{"include_usage":1})", "stream_options.include_usage"},
                  {R"("logit_bias":{"1":5})", "logit_bias"},
                  {R"("best_of":2)", "best_of"},
                  {R"("echo":true)", "echo"},
                  {R"("suffix":"x")", "suffix"},
                  {R"("response_format":{"type":"json_object"})", "response_format"},
                  {R"("use_beam_search":true)", "use_beam_search"},
                  {R"("min_tokens":3)", "min_tokens"},
                  {R"("repetition_penalty":1.1)", "repetition_penalty"},
                  {R"("include_stop_str_in_output":true)", "include_stop_str_in_output"},
                  {R"("guided_json":{"type":"object"})", "guided_json"}});
  // The largest max_tokens that fits is accepted.
  EXPECT_EQ(completion("\"max_tokens\":" + std::to_string(kMaxContext - 5)).gen.max_tokens, kMaxContext - 5);
}

TEST(CompletionRequest, BodyAndContextErrors) {
  const auto& api = tiny_api();
  for (const char* body : {"{", "[1]", "\"x\""}) {
    const ApiError e = api_error_of([&] { parse_completion_request(body, api.ctx); });
    EXPECT_EQ(e.status(), 400) << body;
  }
  std::string deep(300, '[');
  EXPECT_EQ(api_error_of([&] { parse_completion_request(deep, api.ctx); }).status(), 400);
  const std::string long_prompt = "{\"prompt\":[" + [] {
    std::string s;
    for (int i = 0; i < kMaxContext; ++i) s += (i ? ",1" : "1");
    return s;
  }() + "]}";
  const ApiError e = api_error_of([&] { parse_completion_request(long_prompt, api.ctx); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "prompt");
  EXPECT_EQ(e.code(), "context_length_exceeded");
}

TEST(ChatRequest, RendersThePrompt) {
  const auto& api = tiny_api();
  const ChatCompletionRequest r = chat(R"("max_completion_tokens":9,"max_tokens":3,"logprobs":true,"top_logprobs":2)");
  const auto segments = chat::render_k3(chat::parse_request(std::string("{") + kUser + "}"));
  const std::vector<uint32_t> ids = chat::encode(api.tokenizer, segments);
  EXPECT_EQ(r.gen.prompt, std::vector<int64_t>(ids.begin(), ids.end()));
  EXPECT_EQ(r.gen.max_tokens, 9);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.gen.top_logprobs, 2);
  EXPECT_TRUE(r.k3_format);
  EXPECT_TRUE(r.chat.thinking);
  EXPECT_EQ(r.call_id_prefix.rfind("call_", 0), 0u);
  EXPECT_EQ(chat("").gen.top_logprobs, -1);
  EXPECT_EQ(chat(R"("logprobs":true)").gen.top_logprobs, 0);
  EXPECT_FALSE(chat(R"("reasoning_effort":"none")").chat.thinking);
  EXPECT_FALSE(chat(R"("chat_template_kwargs":{"thinking":false})").chat.thinking);
  EXPECT_EQ(chat(R"("reasoning_effort":"low")").chat.effort, "low");
  // "developer" is a system message.
  const ChatCompletionRequest dev =
      parse_chat_request(R"({"messages":[{"role":"developer","content":"be brief"},{"role":"user","content":"hi"}]})", api.ctx);
  EXPECT_EQ(dev.chat.messages[0].role, "system");
}

TEST(ChatRequest, KimiLinearFormat) {
  const auto& api = tiny_api(TinyArch::KimiLinear);
  const ChatCompletionRequest r = parse_chat_request(std::string("{") + kUser + "}", api.ctx);
  EXPECT_FALSE(r.k3_format);
  EXPECT_EQ(r.gen.prompt.back(), api.tokenizer.special_id("<|im_middle|>"));
}

TEST(ChatRequest, SkipSpecialTokens) {
  EXPECT_TRUE(chat("").skip_special_tokens);
  EXPECT_FALSE(chat(R"("skip_special_tokens":false)").skip_special_tokens);
}

const char* kTools = R"("tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object"}}},
                                 {"type":"function","function":{"name":"b","parameters":{"type":"object"}}}])";

TEST(ChatRequest, ToolChoices) {
  for (const char* choice : {"auto", "none", "required"})
    EXPECT_EQ(chat(std::string(kTools) + ",\"tool_choice\":\"" + choice + "\"").chat.tool_choice, choice);
  const ChatCompletionRequest named = chat(std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{"name":"b"}})");
  EXPECT_EQ(named.chat.tool_choice, "required");
  ASSERT_EQ(named.chat.tools.size(), 1u);
  EXPECT_EQ(named.chat.tools[0]["function"]["name"], "b");
  EXPECT_TRUE(chat(std::string(kTools) + R"(,"parallel_tool_calls":false)").chat.tools.size() == 2);
}

TEST(ChatRequest, RefusesBadFields) {
  expect_refused([](const std::string& f) { chat(f); },
                 {{R"("model":"other")", "model", 404, "model_not_found"},
                  {R"("top_logprobs":3)", "top_logprobs"},
                  {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"},
                  {R"("logprobs":1)", "logprobs"},
                  {R"("max_completion_tokens":0)", "max_completion_tokens"},
                  {R"("max_completion_tokens":5000)", "max_completion_tokens", 400, "context_length_exceeded"},
                  {R"("functions":[{"name":"f"}])", "functions"},
                  {R"("function_call":"auto")", "function_call"},
                  {R"("response_format":{"type":"json_schema","json_schema":{}})", "response_format.json_schema.schema"},
                  {R"("response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"number","multipleOf":2}}})",
                   "response_format.json_schema.schema"},
                  {R"("tool_choice":"required")", "tool_choice"},
                  {R"("response_format":{"type":3})", "response_format.type"},
                  {R"("modalities":["text","audio"])", "modalities"},
                  {R"("parallel_tool_calls":"yes")", "parallel_tool_calls"},
                  {R"("tool_choice":"sometimes")", "tool_choice"},
                  {std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{"name":"c"}})", "tool_choice"},
                  {R"("tool_choice":{"type":"function"})", "tool_choice"},
                  {R"("tools":{})", "tools"},
                  {R"("reasoning_effort":"extreme")", "reasoning_effort"},
                  {R"("chat_template_kwargs":{"thinking":"yes"})", "chat_template_kwargs.thinking"}});
  const auto& api = tiny_api();
  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& c : {Case{R"({"messages":[]})", "messages"}, Case{R"({})", "messages"},
                        Case{R"({"messages":[{"role":"bot","content":"x"}]})", "messages[0].role"},
                        Case{R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content[0]"},
                        Case{R"({"messages":[{"role":"user","content":3}]})", "messages[0].content"}}) {
    const ApiError e = api_error_of([&] { parse_chat_request(c.body, api.ctx); });
    EXPECT_EQ(e.status(), 400) << c.body;
    EXPECT_EQ(e.param(), c.param) << c.body << " → " << e.what();
  }
  std::string big = R"({"messages":[{"role":"user","content":")" + std::string(kMaxContext, 'x') + "\"}]}";
  const ApiError e = api_error_of([&] { parse_chat_request(big, api.ctx); });
  EXPECT_EQ(e.code(), "context_length_exceeded");
  EXPECT_EQ(e.param(), "messages");
}

TEST(Tokenize, PromptMessagesAndDetokenize) {
  const auto& api = tiny_api();
  const std::vector<int64_t> hello = ids_of(api.tokenizer, "hello");
  chat::Json expected = {{"tokens", hello}, {"count", hello.size()}, {"max_model_len", kMaxContext}};
  EXPECT_EQ(tokenize_response(R"({"prompt":"hello","add_special_tokens":true})", api.ctx), expected.dump());
  const ChatCompletionRequest r = chat("");
  const chat::Json t = chat::Json::parse(tokenize_response(std::string("{") + kUser + "}", api.ctx));
  EXPECT_EQ(t["tokens"].get<std::vector<int64_t>>(), r.gen.prompt);
  const chat::Json no_gen =
      chat::Json::parse(tokenize_response(std::string("{") + kUser + ",\"add_generation_prompt\":false}", api.ctx));
  EXPECT_LT(no_gen["count"].get<size_t>(), r.gen.prompt.size());
  EXPECT_EQ(api_error_of([&] { tokenize_response(R"({"prompt":3})", api.ctx); }).param(), "prompt");
  EXPECT_EQ(api_error_of([&] { tokenize_response(R"({"prompt":"a","model":"x"})", api.ctx); }).status(), 404);

  chat::Json ids = hello;
  EXPECT_EQ(detokenize_response("{\"tokens\":" + ids.dump() + "}", api.ctx), R"({"prompt":"hello"})");
  const std::string open = std::to_string(api.tokenizer.special_id("<|open|>"));
  EXPECT_EQ(detokenize_response("{\"tokens\":[" + open + "]}", api.ctx), R"({"prompt":"<|open|>"})");
  EXPECT_EQ(api_error_of([&] { detokenize_response(R"({"tokens":[1,512]})", api.ctx); }).param(), "tokens[1]");
  EXPECT_EQ(api_error_of([&] { detokenize_response(R"({"tokens":"ab"})", api.ctx); }).param(), "tokens");
  EXPECT_EQ(api_error_of([&] { detokenize_response(R"({})", api.ctx); }).param(), "tokens");
}

}  // namespace
}  // namespace k3::server::test
