#include "chat/output_parsers.h"

#include "chat/k3_format.h"
#include "chat/kimi_linear_format.h"

namespace k3::chat {

std::unique_ptr<OutputParser> make_output_parser(bool k3, bool thinking, std::string call_id_prefix) {
  if (k3) return std::make_unique<K3OutputParser>(thinking, std::move(call_id_prefix));
  return std::make_unique<KimiLinearOutputParser>();
}

}  // namespace k3::chat
