// /v1/responses request bodies (the OpenAI Responses API), mapped onto the equivalent Chat
// Completions request and parsed by the same code (openai_request.h): the same validation, chat
// rendering, sampling fields and refusals, so a conversation renders exactly as it would through
// /v1/chat/completions.
//
// Mapping: `instructions` → a leading system message; `input` (a string: one user message) items
//   - message (roles user, system, developer → system, assistant; content a string or parts
//     input_text / output_text) → a message;
//   - reasoning (its content's reasoning_text, else its summary's summary_text joined by blank
//     lines) → the reasoning of the assistant message it opens;
//   - function_call {call_id, name, arguments} → a tool call of the current assistant message;
//   - function_call_output {call_id, output} → a tool message.
// Consecutive assistant items (reasoning, then a message, then function calls) make one assistant
// message. Function tools {type, name, description, parameters, strict} → {type, function: {...}};
// tool_choice {type: "function", name} → the named chat form; max_output_tokens →
// max_completion_tokens; reasoning.effort → reasoning_effort; text.format → response_format
// (json_schema flattened into its json_schema member); temperature, top_p, stream,
// parallel_tool_calls, model as they are; the chat path's extensions (seed, top_k, min_p, stop,
// stop_token_ids, ignore_eos, penalties, skip_special_tokens, chat_template_kwargs, and those it
// refuses) pass through. Errors the chat parser finds name the Responses field (input[3].arguments,
// text.format, max_output_tokens...).
//
// previous_response_id: the stored response's items (its input, predecessors included, then its
// output) come before this input; its instructions and tools are not carried over (as OpenAI).
// Unknown id: 400 code previous_response_not_found.
//
// Unknown fields are ignored, as in the chat path; refused (400 naming them): background true,
// conversation, prompt, truncation "auto", include "message.output_text.logprobs", non-function
// tools and tool choices, input items of other types, image/file/audio parts. Accepted and echoed:
// store, metadata (≤ 16 string pairs), user, reasoning.summary, text.verbosity, service_tier,
// prompt_cache_key, safety_identifier, top_logprobs, stream_options.
#pragma once

#include <string>
#include <string_view>

#include "chat/json_text.h"
#include "server/api/openai_request.h"
#include "server/api/response_store.h"

namespace k3::server {

struct ResponsesRequest {
  ChatCompletionRequest chat;   // the equivalent chat request (n = 1)
  chat::Json conversation;      // the items it renders, previous response's first, normalized
  chat::Json echo;              // the request fields a Response object repeats (instructions, tools...)
  bool store = true;
};

ResponsesRequest parse_responses_request(std::string_view body, const ApiContext& ctx, ResponseStore& store);

}  // namespace k3::server
