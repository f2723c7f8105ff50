// One choice of a completion or chat completion, fed the generated tokens one at a time; says what
// to send and when the choice is done.
//
// Text is decoded incrementally (never split inside a UTF-8 sequence), without the added tokens
// when skip_special is set (chat: but the format's markers, which the parser consumes). Stop strings
// are matched on the decoded text (for chat: the raw model output, markers included, before the
// chat parser): the text never includes the stop string, and a tail that could still be the start
// of one is held back until decided. The chat parser is fed by token: marker ids as markers, the
// other tokens' text as text (a marker name spelled by ordinary tokens is text), so the parsed
// reply is a function of the ids alone. A stop token ends the reply for the parser (open channels
// and calls close); a stop string or a limit cuts it (a call cut short stays as streamed). Finish reasons: a stop string or a stop token id (eos unless ignore_eos; the
// token itself is not emitted, nor its logprobs) → "stop"; max_tokens generated → "length"; a chat
// reply that completed a tool call and stopped → "tool_calls". Once a finish reason is set the
// caller ends the sequence; feeding more is a logic error.
//
// Logprobs travel with the text they belong to: a token's entry is released with the update that
// releases the end of its text. At a stop string, tokens that contributed text before the cut are
// kept and those wholly inside the stop string are dropped. Shapes: completions
// {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}; chat
// {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/stream_text.h"
#include "runtime/sampler.h"
#include "server/api/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace k3::server {

enum class OutputKind { kCompletion, kChatK3, kChatKimiLinear };

struct ChoiceConfig {
  OutputKind kind = OutputKind::kCompletion;
  bool thinking = true;                 // K3 chat: the prompt opened the think channel
  std::string call_id_prefix = "call_";  // K3 chat tool call ids
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;
  int64_t max_tokens = 0;  // ≤ 0: no limit here (the scheduler ends the choice with finish())
  int top_logprobs = -1;   // -1: no logprobs
  bool skip_special = true;  // the request's skip_special_tokens (openai_request.h)
};

ChoiceConfig choice_config(const CompletionRequest& request);
ChoiceConfig choice_config(const ChatCompletionRequest& request);

// What one feed (or finish) produced for the client.
struct ChoiceUpdate {
  std::string text;                          // completions: text delta
  chat::ChatDelta delta;                     // chat: reasoning / content / tool call deltas
  chat::Json logprobs;                       // null, or the released tokens' logprobs (shapes above)
  std::optional<std::string> finish_reason;  // set once, on the last update
  bool empty() const { return text.empty() && delta.empty() && logprobs.is_null() && !finish_reason; }
};

class ChoiceOutput {
 public:
  ChoiceOutput(const Tokenizer& tokenizer, ChoiceConfig config);
  ~ChoiceOutput();
  ChoiceOutput(ChoiceOutput&&) noexcept;
  ChoiceOutput& operator=(ChoiceOutput&&) noexcept;

  // A generated token; `logprobs` (of that token) is required when the config asks for logprobs.
  // `closed_to_fit`: a stop token that a constraint brought forward to fit max_tokens (the finish
  // reason is "length").
  ChoiceUpdate feed(int64_t id, const TokenLogprobs* logprobs = nullptr, bool closed_to_fit = false);
  // Ends the choice from outside (e.g. "length" at the context limit, "abort"): flushes what was
  // held back. A held-back stop string prefix is released as text.
  ChoiceUpdate finish(const std::string& reason);

  bool finished() const;
  const std::string& finish_reason() const;  // "" until finished
  int64_t completion_tokens() const;         // every fed token, stop tokens included
  // Chat: the tokens fed up to the one that released the last reasoning text (0 without reasoning).
  int64_t reasoning_tokens() const;

  // The whole choice, for non-streamed responses (complete once finished).
  std::string text() const;                   // completions: the released text
  const chat::ParsedMessage& message() const;  // chat: the parsed reply (after finish)
  chat::Json logprobs() const;                // null when not requested
  bool chat() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace k3::server
