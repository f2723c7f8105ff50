// /v1/responses requests: mapped onto the equivalent chat request (the same prompt tokens as
// /v1/chat/completions for the same conversation), previous_response_id, and every refusal naming
// the Responses field.
#include <gtest/gtest.h>

#include "api_test_util.h"
#include "server/api/responses_request.h"

namespace k3::server::test {
namespace {

using chat::Json;

ResponseStore& no_store() {
  static ResponseStore store(0, 0);
  return store;
}

// The tiny API with a context long enough for the byte-level tokenizer's rendering of tools.
ApiContext long_context(TinyArch arch) {
  ApiContext ctx = tiny_api(arch).ctx;
  ctx.max_context = 8 * kMaxContext;
  return ctx;
}

ResponsesRequest responses(const std::string& body, TinyArch arch = TinyArch::KimiK3, ResponseStore& store = no_store()) {
  return parse_responses_request(body, tiny_api(arch).ctx, store);
}

// The prompt of the chat request `body` (a JSON object text).
std::vector<int64_t> chat_prompt(const std::string& body, TinyArch arch = TinyArch::KimiK3) {
  return parse_chat_request(body, tiny_api(arch).ctx).gen.prompt;
}

TEST(ResponsesRequest, StringInputIsOneUserMessage) {
  for (TinyArch arch : {TinyArch::KimiK3, TinyArch::KimiLinear}) {
    const ResponsesRequest r = responses(R"({"input":"hi"})", arch);
    EXPECT_EQ(r.chat.gen.prompt, chat_prompt(R"({"messages":[{"role":"user","content":"hi"}]})", arch));
    EXPECT_EQ(r.chat.n, 1);
    EXPECT_FALSE(r.chat.stream);
    EXPECT_TRUE(r.store);
    EXPECT_EQ(r.conversation, Json::parse(R"([{"type":"message","role":"user","content":"hi"}])"));
  }
}

// Every item kind, instructions, tools and options against the chat request a chat client would send.
TEST(ResponsesRequest, RendersAsTheEquivalentChatRequest) {
  const std::string body = R"({"model":"tiny","instructions":"Be brief.",
    "input":[{"role":"developer","content":"Use tools."},
             {"type":"message","role":"user","content":[{"type":"input_text","text":"Weather "},{"type":"input_text","text":"in Paris?"}]},
             {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"ignored when content is given"}],
              "content":[{"type":"reasoning_text","text":"I should call it."}]},
             {"type":"message","role":"assistant","id":"msg_1","status":"completed",
              "content":[{"type":"output_text","text":"Checking.","annotations":[]}]},
             {"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
             {"type":"function_call","call_id":"call_2","name":"get_time","arguments":""},
             {"type":"function_call_output","call_id":"call_1","output":"{\"temp_c\":21}"},
             {"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"noon"}]},
             {"role":"user","content":"Thanks"}],
    "tools":[{"type":"function","name":"get_weather","description":"Weather","parameters":{"type":"object"},"strict":true},
             {"type":"function","name":"get_time","parameters":null}],
    "tool_choice":"required","max_output_tokens":7,"temperature":0.5,"top_p":0.9,"reasoning":{"effort":"low","summary":"auto"},
    "seed":5,"top_k":3,"parallel_tool_calls":false,"store":false,"metadata":{"k":"v"},"user":"u","frobnicate":{"x":1}})";
  const std::string chat = R"({"model":"tiny","messages":[{"role":"system","content":"Be brief."},
             {"role":"system","content":"Use tools."},
             {"role":"user","content":[{"type":"text","text":"Weather "},{"type":"text","text":"in Paris?"}]},
             {"role":"assistant","reasoning_content":"I should call it.","content":[{"type":"text","text":"Checking."}],
              "tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
                            {"id":"call_2","type":"function","function":{"name":"get_time","arguments":""}}]},
             {"role":"tool","tool_call_id":"call_1","content":"{\"temp_c\":21}"},
             {"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"noon"}]},
             {"role":"user","content":"Thanks"}],
    "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object"},"strict":true}},
             {"type":"function","function":{"name":"get_time"}}],
    "tool_choice":"required","max_completion_tokens":7,"temperature":0.5,"top_p":0.9,"reasoning_effort":"low","seed":5,"top_k":3})";
  for (TinyArch arch : {TinyArch::KimiK3, TinyArch::KimiLinear}) {
    const ResponsesRequest r = parse_responses_request(body, long_context(arch), no_store());
    const ChatCompletionRequest want = parse_chat_request(chat, long_context(arch));
    EXPECT_EQ(r.chat.gen.prompt, want.gen.prompt);
    EXPECT_EQ(r.chat.gen.max_tokens, 7);
    EXPECT_EQ(r.chat.gen.sampling.temperature, 0.5);
    EXPECT_EQ(r.chat.gen.sampling.top_p, 0.9);
    EXPECT_EQ(r.chat.gen.sampling.top_k, 3);
    EXPECT_EQ(r.chat.gen.sampling.seed, 5u);
    EXPECT_EQ(r.chat.chat.effort, "low");
    EXPECT_EQ(r.chat.chat.tool_choice, "required");
    EXPECT_FALSE(r.store);
    ASSERT_EQ(r.chat.chat.messages.size(), 7u);
    EXPECT_EQ(r.chat.chat.messages[3].tool_calls.size(), 2u);
    EXPECT_EQ(r.conversation.size(), 9u);  // the input items, normalized; instructions are not kept
  }
  const ResponsesRequest r = parse_responses_request(body, long_context(TinyArch::KimiK3), no_store());
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  EXPECT_EQ(r.echo["max_output_tokens"], 7);
  EXPECT_EQ(r.echo["parallel_tool_calls"], false);
  EXPECT_EQ(r.echo["reasoning"], Json::parse(R"({"effort":"low","summary":"auto"})"));
  EXPECT_EQ(r.echo["tools"][1], Json::parse(R"({"type":"function","name":"get_time"})"));
  EXPECT_EQ(r.echo["metadata"], Json::parse(R"({"k":"v"})"));
  EXPECT_EQ(r.echo["user"], "u");
  EXPECT_EQ(r.echo["store"], false);
  EXPECT_EQ(r.echo["text"], Json::parse(R"({"format":{"type":"text"}})"));
}

TEST(ResponsesRequest, ReasoningItemsAndOptions) {
  // A summary-only reasoning item: its parts joined by blank lines; a reasoning item after a reply
  // opens the next assistant message.
  const ResponsesRequest r = responses(R"({"input":[{"role":"user","content":"q"},
      {"type":"reasoning","summary":[{"type":"summary_text","text":"a"},{"type":"summary_text","text":"b"}]},
      {"role":"assistant","content":"one"},
      {"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"c"}]},
      {"role":"assistant","content":"two"}]})");
  ASSERT_EQ(r.chat.chat.messages.size(), 3u);
  EXPECT_EQ(r.chat.chat.messages[1].reasoning, "a\n\nb");
  EXPECT_EQ(r.chat.chat.messages[2].reasoning, "c");
  EXPECT_EQ(r.chat.chat.messages[2].content, std::vector<std::string>{"two"});
  EXPECT_FALSE(responses(R"({"input":"hi","reasoning":{"effort":"none"}})").chat.chat.thinking);
  EXPECT_TRUE(responses(R"({"input":"hi","stream":true})").chat.stream);
  EXPECT_TRUE(responses(R"({"input":"hi","temperature":0})").chat.gen.sampling.greedy);
  // A named tool choice is the chat path's named choice (only that tool declared, required).
  const ResponsesRequest named = responses(R"({"input":"hi","tools":[{"type":"function","name":"a"},{"type":"function","name":"b"}],
      "tool_choice":{"type":"function","name":"b"}})");
  EXPECT_EQ(named.chat.chat.tool_choice, "required");
  ASSERT_EQ(named.chat.chat.tools.size(), 1u);
  EXPECT_EQ(named.chat.chat.tools[0]["function"]["name"], "b");
  // text.format text is accepted; a json_schema is flattened into the chat form.
  EXPECT_EQ(responses(R"({"input":"hi","text":{"format":{"type":"text"},"verbosity":"low"}})").chat.chat.response_format,
            Json::parse(R"({"type":"text"})"));
}

TEST(ResponsesRequest, PreviousResponseContinuesTheConversation) {
  ResponseStore store(4, 1 << 20);
  store.put("resp_1", Json::parse(R"([{"type":"message","role":"user","content":"first"},
      {"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"think"}],"status":"completed"},
      {"id":"msg_1","type":"message","status":"completed","role":"assistant",
       "content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"answer"}]}])"));
  const ResponsesRequest r =
      responses(R"({"instructions":"sys","previous_response_id":"resp_1","input":"second"})", TinyArch::KimiK3, store);
  EXPECT_EQ(r.chat.gen.prompt, chat_prompt(R"({"messages":[{"role":"system","content":"sys"},{"role":"user","content":"first"},
      {"role":"assistant","reasoning_content":"think","content":[{"type":"text","text":"answer"}]},
      {"role":"user","content":"second"}]})"));
  ASSERT_EQ(r.conversation.size(), 4u);
  EXPECT_EQ(r.conversation[2], Json::parse(R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":"answer"}]})"));
  EXPECT_EQ(r.echo["previous_response_id"], "resp_1");
  const ApiError e = api_error_of([&] { responses(R"({"previous_response_id":"resp_2","input":"x"})", TinyArch::KimiK3, store); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "previous_response_id");
  EXPECT_EQ(e.code(), "previous_response_not_found");
}

TEST(ResponsesRequest, RefusesNamingTheResponsesField) {
  const int64_t over = kMaxContext;
  expect_refused([](const std::string& f) { responses("{" + f + "}"); },
                 {{R"("instructions":"x")", "input"},
                  {R"("input":3)", "input"},
                  {R"("input":[])", "input"},
                  {R"("input":[3])", "input[0]"},
                  {R"("input":[{"role":"tool","content":"x"}])", "input[0].role"},
                  {R"("input":[{"role":"user"}])", "input[0].content"},
                  {R"("input":[{"role":"user","content":7}])", "input[0].content"},
                  {R"("input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}])", "input[0].content[0].type"},
                  {R"("input":[{"role":"user","content":[{"type":"text","text":"x"}]}])", "input[0].content[0].type"},
                  {R"("input":[{"role":"user","content":[{"type":"input_text"}]}])", "input[0].content[0].text"},
                  {R"("input":[{"type":"web_search_call","id":"w"}])", "input[0].type"},
                  {R"("input":[{"type":"item_reference","id":"w"}])", "input[0].type"},
                  {R"("input":[{"type":"function_call","name":"f","arguments":"{}"}])", "input[0].call_id"},
                  {R"("input":[{"type":"function_call","call_id":"c","arguments":"{}"}])", "input[0].name"},
                  {R"("input":[{"type":"function_call","call_id":"c","name":"f","arguments":{}}])", "input[0].arguments"},
                  {R"("input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c","name":"f","arguments":"[1]"}])",
                   "input[1].arguments"},
                  {R"("input":[{"type":"function_call_output","call_id":"c"}])", "input[0].output"},
                  {R"("input":[{"type":"function_call_output","call_id":"c","output":"x"}])", "input[0]"},
                  {R"("input":[{"type":"reasoning","summary":"x"}])", "input[0].summary"},
                  {R"("input":"x","tools":{})", "tools"},
                  {R"("input":"x","tools":[{"type":"web_search"}])", "tools[0].type"},
                  {R"("input":"x","tools":[{"type":"function"}])", "tools[0].name"},
                  {R"("input":"x","tools":[{"type":"function","name":"f","parameters":3}])", "tools[0].parameters"},
                  {R"("input":"x","tools":[{"type":"function","name":"f","strict":"yes"}])", "tools[0].strict"},
                  {R"("input":"x","tool_choice":{"type":"file_search"})", "tool_choice"},
                  {R"("input":"x","tool_choice":{"type":"function","name":"g"})", "tool_choice"},
                  {R"("input":"x","tool_choice":"sometimes")", "tool_choice"},
                  {R"("input":"x","max_output_tokens":0)", "max_output_tokens"},
                  {R"("input":"x","max_output_tokens":)" + std::to_string(over), "max_output_tokens", 400, "context_length_exceeded"},
                  {R"("input":"x","reasoning":{"effort":"medium"})", "reasoning.effort"},
                  {R"("input":"x","reasoning":"high")", "reasoning"},
                  {R"("input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"number","multipleOf":2}}})", "text.format.schema"},
                  {R"("input":"x","text":{"format":{"type":"xml"}})", "text.format"},
                  {R"("input":"x","text":{"format":{}})", "text.format.type"},
                  {R"("input":"x","temperature":3)", "temperature"},
                  {R"("input":"x","top_p":0)", "top_p"},
                  {R"("input":"x","model":"gpt-5")", "model", 404, "model_not_found"},
                  {R"("input":"x","stream":"yes")", "stream"},
                  {R"("input":"x","store":"yes")", "store"},
                  {R"("input":"x","background":true)", "background"},
                  {R"("input":"x","truncation":"auto")", "truncation"},
                  {R"("input":"x","conversation":"conv_1")", "conversation"},
                  {R"("input":"x","include":["message.output_text.logprobs"])", "include[0]"},
                  {R"("input":"x","include":"x")", "include"},
                  {R"("input":"x","metadata":{"k":1})", "metadata.k"},
                  {R"("input":"x","metadata":[])", "metadata"},
                  {R"("input":"x","user":5)", "user"},
                  {R"("input":"x","instructions":5)", "instructions"},
                  {R"("input":"x","previous_response_id":5)", "previous_response_id"},
                  {R"("input":"x","parallel_tool_calls":"no")", "parallel_tool_calls"},
                  {R"("input":"x","top_logprobs":21)", "top_logprobs"},
                  {R"("input":"x","logit_bias":{"1":5})", "logit_bias"}});
  const std::string huge = "{\"input\":\"" + std::string(4 * kMaxContext, 'x') + "\"}";
  const ApiError e = api_error_of([&] { responses(huge); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.param(), "input");
  EXPECT_EQ(e.code(), "context_length_exceeded");
  for (const char* body : {"{", "[1]", "\"x\"", "{\"input\":\"\\ud800\"}"}) EXPECT_EQ(api_error_of([&] { responses(body); }).status(), 400) << body;
}

}  // namespace
}  // namespace k3::server::test
