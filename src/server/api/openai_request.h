// OpenAI-compatible request bodies (/v1/completions, /v1/chat/completions, /tokenize, /detokenize)
// parsed into what the scheduler needs. Every client error is an ApiError: 400 naming the field in
// `param` and in the message; 404 (code model_not_found) for another model's name; 400 with code
// context_length_exceeded when the prompt (plus max_tokens) does not fit the context.
//
// Unknown fields are ignored, as OpenAI servers do; known fields that would change the result but
// are not supported are refused naming them: logit_bias (non-empty), best_of ≠ n, echo, suffix,
// response_format json_object / json_schema, the legacy functions / function_call, prediction,
// audio, non-text modalities, web_search_options, and the vLLM extensions use_beam_search,
// min_tokens, repetition_penalty ≠ 1, include_stop_str_in_output and guided_*.
//
// Chat specifics: role "developer" is read as "system"; a named tool_choice
// {"type":"function","function":{"name":N}} is rendered as tool_choice "required" with only tool N
// declared (the chat formats have no named form; nothing constrains the decoding).
// Completions: a string prompt is encoded with special-token names recognised (a pre-rendered chat
// prompt keeps its markers); no BOS is added, as `k3 generate` does not add one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/request.h"
#include "grammar/grammar_ir.h"
#include "model/config.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace k3::server {

// One choice's generation: what the scheduler needs.
struct GenerationParams {
  std::vector<int64_t> prompt;          // token ids, at least one
  int64_t max_tokens = 0;               // ≥ 1; prompt + max_tokens ≤ the context limit
  SamplingParams sampling;              // temperature 0 → greedy; default temperature 1
  std::vector<int64_t> stop_token_ids;  // the request's, plus the model's eos ids unless ignore_eos
  int top_logprobs = -1;                // -1: no logprobs; else 0..20 alternatives per token
};

struct ApiContext {
  const Tokenizer& tokenizer;
  const K3Config& config;
  std::string served_model_name;
  int64_t max_context;  // > 0: prompt + generated tokens of one sequence
  int max_n = 16;
};

// Fields common to both endpoints.
struct RequestCommon {
  GenerationParams gen;
  int n = 1;
  std::vector<std::string> stop;  // at most 4, none empty; matched on the decoded text
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // skip_special_tokens (vLLM's field, default true): the text leaves out every added token (chat:
  // but the format's markers, which the parser consumes); false keeps them all.
  bool skip_special_tokens = true;
  std::string model;           // the served model name
};

struct CompletionRequest : RequestCommon {};

struct ChatCompletionRequest : RequestCommon {
  chat::Request chat;          // messages/tools/thinking, for the output parser
  bool k3_format = true;       // the checkpoint's chat format: Kimi-K3 XTML, else Kimi-Linear
  bool logprobs = false;       // gen.top_logprobs ≥ 0 exactly when set
  std::string call_id_prefix;  // tool call ids: this + running number (unique per request)
  // The grammar every choice's reply follows (response_format JSON modes, tool_choice required):
  // chat/reply_grammar.h; nullopt when unconstrained.
  std::optional<grammar::Grammar> reply_grammar;
};

// Choice `index` of an n-choice request: the same parameters with seed + index.
GenerationParams choice_params(const GenerationParams& gen, int index);

// The body as a JSON object (400 for bad JSON or another value).
chat::Json parse_request_body(std::string_view body);
CompletionRequest parse_completion_request(std::string_view body, const ApiContext& ctx);
ChatCompletionRequest parse_chat_request(std::string_view body, const ApiContext& ctx);
// The chat request of a parsed body (what /v1/responses maps its requests onto).
ChatCompletionRequest chat_request_from_json(const chat::Json& body, const ApiContext& ctx);

// /tokenize: {"prompt": str} (encoded as a completion prompt) or {"messages": [...], tools...,
// "add_generation_prompt"?} (rendered as a chat request); "add_special_tokens" is accepted and has
// no effect (no BOS is ever added). Returns {"tokens":[...],"count":N,"max_model_len":M}.
std::string tokenize_response(std::string_view body, const ApiContext& ctx);
// /detokenize: {"tokens": [ids]} → {"prompt": text}; ids outside the tokenizer's vocabulary → 400.
std::string detokenize_response(std::string_view body, const ApiContext& ctx);

}  // namespace k3::server
