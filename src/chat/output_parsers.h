// The output parser of a chat format, for callers that choose the format at run time.
#pragma once

#include <memory>
#include <string>

#include "chat/stream_text.h"

namespace k3::chat {

// k3: a K3OutputParser (thinking: the prompt opened the think channel; tool call ids are
// call_id_prefix + N); otherwise a KimiLinearOutputParser (the other arguments unused).
std::unique_ptr<OutputParser> make_output_parser(bool k3, bool thinking, std::string call_id_prefix = "call_");

}  // namespace k3::chat
