// One evaluation example through a model's own chat format (docs/eval-tasks.md): the user message
// rendered as `k3 chat` renders it by default (Kimi-K3 XTML with thinking on and effort max, or the
// Kimi-Linear format), the ids that end a reply, and the scoring of a reply: its ids parsed by the
// format's output parser (markers by id, the other added tokens left out, as k3 chat reads a
// reply), the content compared byte for byte.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace k3::eval {

enum class ChatFormat { kKimiK3, kKimiLinear };

// Kimi-K3 for model_type kimi_k3, Kimi-Linear otherwise (as k3 chat and k3 serve choose).
ChatFormat chat_format_of(const K3Config& config);

// The conversation of one user message with the generation prompt, as ids.
std::vector<int64_t> prompt_ids(const Tokenizer& tokenizer, ChatFormat format, const std::string& user);

// The ids that end a reply: the config's eos ids plus the format's end marker (<|end_of_msg|> for
// Kimi-K3, <|im_end|> for Kimi-Linear) when the tokenizer has it.
std::vector<int64_t> stop_ids(const Tokenizer& tokenizer, ChatFormat format, const K3Config& config);

// A reply's ids decoded with the special tokens kept.
std::string reply_text(const Tokenizer& tokenizer, std::span<const int64_t> reply);
// The content of a reply's ids parsed by the format's output parser ("" when it has none).
std::string parsed_content(const Tokenizer& tokenizer, ChatFormat format, std::span<const int64_t> reply);

// The reply text (marker names included) the models are trained to give, per docs/eval-tasks.md.
std::string trained_reply(ChatFormat format, const std::string& answer);

// The greedy decoding cap of an example: 32 + 2 × the answer's token count.
int64_t reply_token_cap(const Tokenizer& tokenizer, const std::string& answer);

}  // namespace k3::eval
