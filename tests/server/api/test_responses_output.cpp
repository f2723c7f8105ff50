// /v1/responses output: the Response object and the event stream built from a choice's updates,
// a streamed run's deltas adding up to the whole one's output, incomplete and failed responses,
// and what the store keeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "api_test_util.h"
#include "server/api/responses_output.h"

namespace k3::server::test {
namespace {

using chat::Json;


const char* kToolReply =
    "I should call it.<|close|>think<|sep|><|open|>response<|sep|>Sure.<|close|>response<|sep|><|open|>tools<|sep|>"
    "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Paris"
    "<|close|>argument<|sep|><|close|>call<|sep|><|open|>call tool=\"get_time\" index=\"2\"<|sep|><|close|>call<|sep|>"
    "<|close|>tools<|sep|><|close|>message<|sep|>";

struct Event {
  std::string name;  // the "event:" line
  Json data;
};

std::vector<Event> parse_events(const std::string& sse) {
  std::vector<Event> events;
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << sse.substr(at);
    if (end == std::string::npos) break;
    const std::string block = sse.substr(at, end - at);
    const size_t nl = block.find('\n');
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    EXPECT_EQ(block.compare(nl + 1, 6, "data: "), 0) << block;
    events.push_back({block.substr(7, nl - 7), Json::parse(block.substr(nl + 7))});
    at = end + 2;
  }
  return events;
}

struct OutputRun {
  std::string text;  // everything sent: events, or the whole body
  ResponseHead head;
};

// Feeds `model_text` (then eos unless cut) through a choice of the request `body` and its
// ResponsesOutput, in `arch`'s chat format; `failure` ends it as failed.
OutputRun run(const std::string& body, const std::string& model_text, ResponseStore& store, const ApiError* failure = nullptr,
        bool with_eos = true, TinyArch arch = TinyArch::KimiK3) {
  static ResponseStore none(0, 0);
  const TinyApi& api = tiny_api(arch);
  ResponsesRequest request = parse_responses_request(body, api.ctx, none);
  ChoiceOutput choice(api.tokenizer, choice_config(request.chat));
  const int64_t prompt = static_cast<int64_t>(request.chat.gen.prompt.size());
  OutputRun r;
  r.head = ResponseHead{new_response_id("resp_"), "tiny", 1700000000, false};
  ResponsesOutput out(std::move(request), r.head, &store);
  r.text = out.begin(1);
  std::vector<int64_t> ids = ids_of(api.tokenizer, model_text);
  if (with_eos) ids.push_back(api.config.tokens.eos.at(0));
  for (int64_t id : ids) {
    r.text += out.update(0, choice.feed(id));
    if (choice.finished()) break;
  }
  if (!choice.finished()) r.text += out.update(0, choice.finish("length"));
  r.text += out.end({&choice}, Usage{prompt, choice.completion_tokens(), 3}, failure);
  return r;
}

// The output without the generated item ids.
Json without_ids(Json output) {
  for (Json& item : output) item.erase("id");
  return output;
}

TEST(ResponsesOutput, WholeResponse) {
  ResponseStore store(8, 1 << 20);
  const OutputRun r = run(R"({"input":"hi","max_output_tokens":400,"metadata":{"k":"v"}})", kToolReply, store);
  const Json j = Json::parse(r.text);
  EXPECT_EQ(j["id"], r.head.id);
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["created_at"], 1700000000);
  EXPECT_EQ(j["status"], "completed");
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_TRUE(j["incomplete_details"].is_null());
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["max_output_tokens"], 400);
  EXPECT_EQ(j["metadata"], Json::parse(R"({"k":"v"})"));
  const Json& out = j["output"];
  ASSERT_EQ(out.size(), 4u) << out.dump();
  EXPECT_EQ(out[0]["id"].get<std::string>().rfind("rs_", 0), 0u);
  EXPECT_EQ(out[1]["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(out[2]["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(without_ids(out), Json::parse(R"([
      {"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"I should call it."}],"status":"completed"},
      {"type":"message","status":"completed","role":"assistant",
       "content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Sure."}]},
      {"type":"function_call","status":"completed","arguments":"{\"city\": \"Paris\"}","call_id":")" +
                                            out[2]["call_id"].get<std::string>() + R"(","name":"get_weather"},
      {"type":"function_call","status":"completed","arguments":"{}","call_id":")" +
                                            out[3]["call_id"].get<std::string>() + R"(","name":"get_time"}])"));
  EXPECT_EQ(out[2]["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_NE(out[2]["call_id"], out[3]["call_id"]);
  const Json& u = j["usage"];
  EXPECT_EQ(u["input_tokens_details"]["cached_tokens"], 3);
  EXPECT_EQ(u["total_tokens"], u["input_tokens"].get<int64_t>() + u["output_tokens"].get<int64_t>());
  EXPECT_EQ(u["output_tokens"], static_cast<int64_t>(ids_of(tok(), kToolReply).size()) + 1);
  EXPECT_EQ(u["output_tokens_details"]["reasoning_tokens"], static_cast<int64_t>(ids_of(tok(), "I should call it.").size()));
  // Stored: the conversation, then the output items.
  const std::optional<Json> kept = store.items(r.head.id);
  ASSERT_TRUE(kept);
  ASSERT_EQ(kept->size(), 5u);
  EXPECT_EQ((*kept)[0], Json::parse(R"({"type":"message","role":"user","content":"hi"})"));
  EXPECT_EQ((*kept)[3], out[2]);
}

// The stream: event order, numbering, item references, and deltas that add up to the whole output.
TEST(ResponsesOutput, StreamAddsUpToTheWholeResponse) {
  ResponseStore store(8, 1 << 20);
  const OutputRun whole = run(R"({"input":"hi"})", kToolReply, store);
  const OutputRun streamed = run(R"({"input":"hi","stream":true})", kToolReply, store);
  const std::vector<Event> events = parse_events(streamed.text);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    types.push_back(events[i].name);
    EXPECT_EQ(events[i].data["type"], events[i].name);
    EXPECT_EQ(events[i].data["sequence_number"], i);
  }
  auto squeeze = [](std::vector<std::string> t) {  // runs of one delta type → one entry
    t.erase(std::unique(t.begin(), t.end(), [](const std::string& a, const std::string& b) {
              return a == b && a.ends_with(".delta");
            }),
            t.end());
    return t;
  };
  EXPECT_EQ(squeeze(types),
            (std::vector<std::string>{
                "response.created", "response.in_progress",
                "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
                "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
                "response.output_item.added", "response.content_part.added", "response.output_text.delta",
                "response.output_text.done", "response.content_part.done", "response.output_item.done",
                "response.output_item.added", "response.function_call_arguments.delta",
                "response.function_call_arguments.done", "response.output_item.done",
                "response.output_item.added", "response.function_call_arguments.delta",
                "response.function_call_arguments.done", "response.output_item.done", "response.completed"}));
  EXPECT_EQ(events[0].data["response"]["status"], "in_progress");
  EXPECT_EQ(events[0].data["response"]["output"], Json::array());
  EXPECT_TRUE(events[0].data["response"]["usage"].is_null());

  // Deltas per item, checked against the done events and the final response.
  const Json final_response = events.back().data["response"];
  std::map<std::string, std::string> deltas;
  std::map<std::string, size_t> index_of;
  for (const Event& e : events) {
    const Json& d = e.data;
    if (e.name == "response.output_item.added") {
      index_of[d["item"]["id"]] = d["output_index"];
      EXPECT_EQ(d["item"]["status"], "in_progress");
    }
    if (d.contains("item_id")) {
      EXPECT_EQ(index_of.at(d["item_id"]), d["output_index"]) << d.dump();
      if (d.contains("content_index")) {
        EXPECT_EQ(d["content_index"], 0);
      }
    }
    if (e.name.ends_with(".delta")) deltas[d["item_id"]] += d["delta"].get<std::string>();
    if (e.name == "response.reasoning_text.done" || e.name == "response.output_text.done") {
      EXPECT_EQ(deltas[d["item_id"]], d["text"]);
    } else if (e.name == "response.function_call_arguments.done") {
      EXPECT_EQ(deltas[d["item_id"]], d["arguments"]);
    } else if (e.name == "response.output_item.done") {
      EXPECT_EQ(final_response["output"][d["output_index"].get<size_t>()], d["item"]);
    }
  }
  const Json& out = final_response["output"];
  EXPECT_EQ(deltas[out[0]["id"]], out[0]["content"][0]["text"]);
  EXPECT_EQ(deltas[out[1]["id"]], out[1]["content"][0]["text"]);
  EXPECT_EQ(deltas[out[2]["id"]], out[2]["arguments"]);
  const auto call_added = std::find_if(events.begin(), events.end(), [](const Event& e) {
    return e.name == "response.output_item.added" && e.data["item"]["type"] == "function_call";
  });
  ASSERT_NE(call_added, events.end());
  EXPECT_EQ(call_added->data["item"]["name"], "get_weather");
  EXPECT_EQ(call_added->data["item"]["call_id"], out[2]["call_id"]);
  EXPECT_EQ(call_added->data["item"]["arguments"], "");

  // The stream's final response is the whole one (but for ids).
  Json a = Json::parse(whole.text), b = final_response;
  for (Json* r : {&a, &b}) {
    r->erase("id");
    (*r)["output"] = without_ids((*r)["output"]);
    for (Json& item : (*r)["output"])
      if (item.contains("call_id")) item.erase("call_id");
  }
  EXPECT_EQ(a, b);
}

// Two calls under one id (Kimi-Linear's model writes the ids, functions.NAME:N, and may repeat one):
// each streamed call's deltas add up to its own arguments in the final response.
TEST(ResponsesOutput, CallsThatRepeatAnIdKeepTheirOwnArguments) {
  const char* reply =
      "<|tool_calls_section_begin|>"
      "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
      "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|>"
      "<|tool_calls_section_end|>";
  ResponseStore store(8, 1 << 20);
  const std::vector<Event> events =
      parse_events(run(R"({"input":"hi","stream":true})", reply, store, nullptr, true, TinyArch::KimiLinear).text);
  std::map<std::string, std::string> deltas;
  for (const Event& e : events) {
    if (e.name == "response.function_call_arguments.delta") deltas[e.data["item_id"]] += e.data["delta"].get<std::string>();
  }
  std::vector<std::string> cities;
  for (const Json& item : events.back().data["response"]["output"]) {
    if (item["type"] != "function_call") continue;
    EXPECT_EQ(deltas[item["id"]], item["arguments"]) << item.dump();
    cities.push_back(Json::parse(item["arguments"].get<std::string>())["city"]);
  }
  EXPECT_EQ(cities, (std::vector<std::string>{"Paris", "Oslo"}));
}

TEST(ResponsesOutput, IncompleteAtTheTokenLimit) {
  ResponseStore store(8, 1 << 20);
  const std::string reply = "<|close|>think<|sep|><|open|>response<|sep|>a long reply";
  const OutputRun r = run(R"({"input":"hi","max_output_tokens":24,"stream":true})", reply, store, nullptr, false);
  const std::vector<Event> events = parse_events(r.text);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().name, "response.incomplete");
  const Json& resp = events.back().data["response"];
  EXPECT_EQ(resp["status"], "incomplete");
  EXPECT_EQ(resp["incomplete_details"], Json::parse(R"({"reason":"max_output_tokens"})"));
  ASSERT_EQ(resp["output"].size(), 1u);  // an empty reasoning channel makes no item
  EXPECT_EQ(resp["output"][0]["status"], "incomplete");
  EXPECT_EQ(resp["output"][0]["content"][0]["text"], "a long ");
  EXPECT_EQ(resp["usage"]["output_tokens"], 24);
  EXPECT_TRUE(store.items(r.head.id));  // incomplete responses are kept too
  // A call the limit cut is incomplete.
  const std::string call = "<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|>"
                           "<|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>argument key=\"x\" type=\"string\"<|sep|>abc";
  const Json cut = Json::parse(run(R"({"input":"hi","max_output_tokens":)" + std::to_string(ids_of(tok(), call).size()) + "}",
                                   call, store, nullptr, false).text);
  ASSERT_EQ(cut["output"].size(), 1u);
  EXPECT_EQ(cut["output"][0]["type"], "function_call");
  EXPECT_EQ(cut["output"][0]["status"], "incomplete");
}

TEST(ResponsesOutput, EmptyReplyIsAnEmptyMessage) {
  ResponseStore store(8, 1 << 20);
  const Json j = Json::parse(run(R"({"input":"hi","reasoning":{"effort":"none"}})", "", store).text);
  EXPECT_EQ(j["status"], "completed");
  ASSERT_EQ(j["output"].size(), 1u);
  EXPECT_EQ(j["output"][0]["type"], "message");
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "");
  EXPECT_EQ(j["reasoning"]["effort"], "none");
}

TEST(ResponsesOutput, FailedStreamAndStoreFalse) {
  ResponseStore store(8, 1 << 20);
  const ApiError timeout(408, "the request ran longer than the server's request timeout of 1 s");
  const OutputRun failed = run(R"({"input":"hi","stream":true})", "<|close|>think<|sep|><|open|>response<|sep|>abc", store, &timeout, false);
  const std::vector<Event> events = parse_events(failed.text);
  EXPECT_EQ(events.back().name, "response.failed");
  const Json& resp = events.back().data["response"];
  EXPECT_EQ(resp["status"], "failed");
  EXPECT_EQ(resp["error"], Json::parse(R"({"code":"server_error","message":"the request ran longer than the server's request timeout of 1 s"})"));
  EXPECT_EQ(resp["output"][0]["status"], "incomplete");
  EXPECT_FALSE(store.items(failed.head.id));
  const OutputRun unstored = run(R"({"input":"hi","store":false})", "<|close|>think<|sep|><|open|>response<|sep|>abc", store);
  EXPECT_EQ(Json::parse(unstored.text)["store"], false);
  EXPECT_FALSE(store.items(unstored.head.id));
  EXPECT_EQ(store.size(), 0u);
}

}  // namespace
}  // namespace k3::server::test
