#include "server/api/openai_response.h"

#include <chrono>
#include <cstdio>
#include <random>

namespace k3::server {
namespace {

using chat::Json;

Json usage_json(const Usage& u) {
  Json j = Json::object();
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  return j;
}

Json head_json(const ResponseHead& head, const char* object) {
  Json j = Json::object();
  j["id"] = head.id;
  j["object"] = object;
  j["created"] = head.created;
  j["model"] = head.model;
  return j;
}

Json finish_json(const std::optional<std::string>& reason) { return reason ? Json(*reason) : Json(nullptr); }

std::string chunk_event(const ResponseHead& head, const char* object, Json choice) {
  Json j = head_json(head, object);
  j["choices"] = Json::array({std::move(choice)});
  if (head.include_usage) j["usage"] = nullptr;
  return sse_event(j);
}

Json delta_json(const chat::ChatDelta& d) {
  Json j = Json::object();
  if (!d.reasoning_content.empty()) j["reasoning_content"] = d.reasoning_content;
  if (!d.content.empty()) j["content"] = d.content;
  if (!d.tool_calls.empty()) {
    Json calls = Json::array();
    for (const auto& c : d.tool_calls) {
      Json call = Json::object();
      call["index"] = c.index;
      Json fn = Json::object();
      if (!c.id.empty()) {
        call["id"] = c.id;
        call["type"] = "function";
        fn["name"] = c.name;
      }
      fn["arguments"] = c.arguments;
      call["function"] = std::move(fn);
      calls.push_back(std::move(call));
    }
    j["tool_calls"] = std::move(calls);
  }
  return j;
}

}  // namespace

std::string new_response_id(std::string_view prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[25];
  std::snprintf(hex, sizeof hex, "%012llx%012llx", static_cast<unsigned long long>(rng() >> 16),
                static_cast<unsigned long long>(rng() >> 16));
  return std::string(prefix) + hex;
}

int64_t unix_seconds_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Usage usage_of(int64_t prompt_tokens, const std::vector<const ChoiceOutput*>& choices) {
  Usage u{prompt_tokens, 0};
  for (const ChoiceOutput* c : choices) u.completion_tokens += c->completion_tokens();
  return u;
}

namespace {

// The whole (non-streamed) response: one entry per choice, `body` adding its text or message.
template <class Body>
std::string whole_response(const ResponseHead& head, const char* object, const std::vector<const ChoiceOutput*>& choices,
                           const Usage& usage, Body body) {
  Json j = head_json(head, object);
  Json list = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    Json c = Json::object();
    c["index"] = i;
    body(*choices[i], c);
    c["logprobs"] = choices[i]->logprobs();
    c["finish_reason"] = choices[i]->finish_reason();
    list.push_back(std::move(c));
  }
  j["choices"] = std::move(list);
  j["usage"] = usage_json(usage);
  return chat::dump_output(j);
}

}  // namespace

std::string completion_response(const ResponseHead& head, const std::vector<const ChoiceOutput*>& choices, const Usage& usage) {
  return whole_response(head, "text_completion", choices, usage,
                        [](const ChoiceOutput& o, Json& c) { c["text"] = o.text(); });
}

std::string chat_response(const ResponseHead& head, const std::vector<const ChoiceOutput*>& choices, const Usage& usage) {
  return whole_response(head, "chat.completion", choices, usage,
                        [](const ChoiceOutput& o, Json& c) { c["message"] = o.message().to_json(); });
}

std::string sse_event(const Json& chunk) { return "data: " + chat::dump_output(chunk) + "\n\n"; }

std::string chat_role_chunk(const ResponseHead& head, size_t index) {
  Json c = Json::object();
  c["index"] = index;
  c["delta"] = Json{{"role", "assistant"}, {"content", ""}};
  c["logprobs"] = nullptr;
  c["finish_reason"] = nullptr;
  return chunk_event(head, "chat.completion.chunk", std::move(c));
}

std::string chat_chunk(const ResponseHead& head, size_t index, const ChoiceUpdate& update) {
  if (update.delta.empty() && update.logprobs.is_null() && !update.finish_reason) return "";
  Json c = Json::object();
  c["index"] = index;
  c["delta"] = delta_json(update.delta);
  c["logprobs"] = update.logprobs;
  c["finish_reason"] = finish_json(update.finish_reason);
  return chunk_event(head, "chat.completion.chunk", std::move(c));
}

std::string completion_chunk(const ResponseHead& head, size_t index, const ChoiceUpdate& update) {
  if (update.text.empty() && update.logprobs.is_null() && !update.finish_reason) return "";
  Json c = Json::object();
  c["index"] = index;
  c["text"] = update.text;
  c["logprobs"] = update.logprobs;
  c["finish_reason"] = finish_json(update.finish_reason);
  return chunk_event(head, "text_completion", std::move(c));
}

std::string usage_chunk(const ResponseHead& head, bool chat, const Usage& usage) {
  Json j = head_json(head, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = Json::array();
  j["usage"] = usage_json(usage);
  return sse_event(j);
}

namespace {

class ChunkOutput final : public OutputFormat {
 public:
  ChunkOutput(ResponseHead head, bool stream, bool chat) : head_(std::move(head)), stream_(stream), chat_(chat) {}

  std::string begin(size_t choices) override {
    std::string out;
    if (chat_)
      for (size_t i = 0; i < choices; ++i) out += chat_role_chunk(head_, i);
    return out;
  }

  std::string update(size_t index, const ChoiceUpdate& update) override {
    if (!stream_ || update.empty()) return "";
    return chat_ ? chat_chunk(head_, index, update) : completion_chunk(head_, index, update);
  }

  std::string end(const std::vector<const ChoiceOutput*>& choices, const Usage& usage, const ApiError* failure) override {
    if (!stream_) return chat_ ? chat_response(head_, choices, usage) : completion_response(head_, choices, usage);
    std::string out;
    if (failure) {
      out += "data: ";
      out += failure->body();
      out += "\n\n";
    }
    if (head_.include_usage) out += usage_chunk(head_, chat_, usage);
    out += kSseDone;
    return out;
  }

 private:
  ResponseHead head_;
  bool stream_, chat_;
};

}  // namespace

std::unique_ptr<OutputFormat> completions_output(ResponseHead head, bool stream) {
  return std::make_unique<ChunkOutput>(std::move(head), stream, false);
}

std::unique_ptr<OutputFormat> chat_output(ResponseHead head, bool stream) {
  return std::make_unique<ChunkOutput>(std::move(head), stream, true);
}

std::string models_response(const std::string& served_model_name, int64_t created, int64_t max_model_len) {
  Json m = Json::object();
  m["id"] = served_model_name;
  m["object"] = "model";
  m["created"] = created;
  m["owned_by"] = "k3";
  m["max_model_len"] = max_model_len;
  Json j = Json::object();
  j["object"] = "list";
  j["data"] = Json::array({std::move(m)});
  return chat::dump_output(j);
}

}  // namespace k3::server
