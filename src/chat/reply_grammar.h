// The grammar an assistant reply must follow when the request constrains it: response_format
// json_object / json_schema (or a content grammar given by the caller), tool_choice "required" (a
// named function arrives as "required" with only that tool). It covers the whole reply after the
// generation prompt in the checkpoint's chat format, with the format's markers as special-token
// terminals, and ends where the stop token (<|end_of_msg|>, <|im_end|>) may come: the matcher's
// stop ids.
//
// Kimi-K3 (XTML): the reasoning is free text (thinking on), then the canonical channel sequence
// close(think) open(response); the response text follows the content grammar (without one it is
// free, or empty when a call is required); the tools channel is required, optional (tools
// declared, tool_choice auto, content constrained) or absent; the message closes. Each call names a declared tool; its arguments take
// the argument form the model writes (one <|open|>argument key=… type=…<|sep|> per property in
// declaration order, required ones always, string values raw) when every property has one plain
// JSON type and strings carry no pattern or format, else one json block holding the arguments
// object under the tool's parameters schema.
// Kimi-Linear: the content (as above), then the tool-call section (calls `functions.NAME:N` with
// the arguments as JSON under the parameters schema).
#pragma once

#include <optional>

#include "chat/request.h"
#include "grammar/grammar_ir.h"

namespace k3::chat {

enum class ReplyFormat { kKimiK3, kKimiLinear };

// nullopt when the request constrains nothing (no JSON response format, no required tool call and
// no `content` grammar). Throws k3::Error naming the field for an unusable schema
// ("response_format.json_schema…", "tools[i].function.parameters…").
std::optional<grammar::Grammar> reply_grammar(const Request& request, ReplyFormat format,
                                              const std::optional<grammar::Grammar>& content = std::nullopt);

}  // namespace k3::chat
