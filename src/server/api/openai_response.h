// OpenAI response bodies: non-streamed completions and chat completions, the server-sent-event
// chunks of streamed ones, the model list.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/json_text.h"
#include "server/api/choice_output.h"

namespace k3::server {

struct ResponseHead {
  std::string id;      // "cmpl-…" / "chatcmpl-…" (new_response_id)
  std::string model;   // the served model name
  int64_t created = 0;  // unix seconds
  bool include_usage = false;  // streamed: every chunk carries "usage": null, the last one the usage
};

struct Usage {
  int64_t prompt_tokens = 0;      // counted once for all n choices
  int64_t completion_tokens = 0;  // all choices
};

// prefix + 24 random hex digits.
std::string new_response_id(std::string_view prefix);
int64_t unix_seconds_now();
// The usage of a request: prompt_tokens, and the completion tokens of every choice.
Usage usage_of(int64_t prompt_tokens, const std::vector<const ChoiceOutput*>& choices);

// Non-streamed bodies over finished choices (choice i has index i).
std::string completion_response(const ResponseHead& head, const std::vector<const ChoiceOutput*>& choices, const Usage& usage);
std::string chat_response(const ResponseHead& head, const std::vector<const ChoiceOutput*>& choices, const Usage& usage);

// Server-sent events: "data: JSON\n\n"; the stream ends with kSseDone.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
std::string sse_event(const chat::Json& chunk);
// The first chunk of a streamed chat choice: delta {"role":"assistant","content":""}.
std::string chat_role_chunk(const ResponseHead& head, size_t index);
// One update as a chunk event; "" when the update is empty (nothing to send).
std::string chat_chunk(const ResponseHead& head, size_t index, const ChoiceUpdate& update);
std::string completion_chunk(const ResponseHead& head, size_t index, const ChoiceUpdate& update);
// The usage chunk (choices []), sent before kSseDone when include_usage.
std::string usage_chunk(const ResponseHead& head, bool chat, const Usage& usage);

// /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by":"k3","max_model_len"}]}.
std::string models_response(const std::string& served_model_name, int64_t created, int64_t max_model_len);

}  // namespace k3::server
