// OpenAI response bodies: non-streamed completions and chat completions, the server-sent-event
// chunks of streamed ones, the model list; OutputFormat, how an endpoint writes a request's output.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/json_text.h"
#include "server/api/choice_output.h"
#include "server/api_error.h"

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
  int64_t cached_tokens = 0;      // prompt tokens the prefix cache served (the first choice's admission)
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

// How an endpoint writes one request's output, driven by CompletionJob under its lock: the events
// of a stream as the choices' updates come, then the end.
class OutputFormat {
 public:
  virtual ~OutputFormat() = default;
  // Streamed: the events that open the stream, once every choice is queued.
  virtual std::string begin(size_t choices) = 0;
  // An update of choice `index`: what to send now ("" for nothing; always "" when not streamed,
  // though the format may record it).
  virtual std::string update(size_t index, const ChoiceUpdate& update) = 0;
  // Every choice ended: the whole body, or the stream's last events. `failure` (a timeout or an
  // engine error) only comes to a stream: a whole response answers it as an error instead.
  virtual std::string end(const std::vector<const ChoiceOutput*>& choices, const Usage& usage, const ApiError* failure) = 0;
};

// /v1/completions and /v1/chat/completions: the chunks above, then usage (include_usage) and kSseDone.
std::unique_ptr<OutputFormat> completions_output(ResponseHead head, bool stream);
std::unique_ptr<OutputFormat> chat_output(ResponseHead head, bool stream);

// /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by":"k3","max_model_len"}]}.
std::string models_response(const std::string& served_model_name, int64_t created, int64_t max_model_len);

}  // namespace k3::server
