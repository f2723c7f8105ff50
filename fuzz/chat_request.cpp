// Fuzzes chat requests: any bytes either parse (then both chat formats render, and the Kimi-K3
// output parser reads the rendering back) or throw k3::Error; nothing crashes, recurses without
// bound or leaks a library exception.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "chat/k3_format.h"
#include "chat/kimi_linear_format.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<k3::chat::Request> request;
  try {
    request = k3::chat::parse_request(text, "fuzz_request.json");
  } catch (const k3::Error&) {
    return 0;
  }
  if (request->messages.empty()) __builtin_trap();
  try {
    const std::string k3 = k3::chat::join(k3::chat::render_k3(*request));
    k3::chat::parse_k3_output(k3, request->thinking);
  } catch (const k3::Error&) {
  }
  try {
    k3::chat::join(k3::chat::render_kimi_linear(*request));
  } catch (const k3::Error&) {
  }
  return 0;
}
