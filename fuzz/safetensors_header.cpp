// libFuzzer target: the input is a whole safetensors file. Every malformed input must end in a
// k3::Error; anything else (crash, sanitizer report, other exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const k3::SafetensorsHeader header = k3::parse_safetensors_buffer(std::span<const uint8_t>(data, size), "fuzz");
    for (const k3::TensorInfo& t : header.tensors)
      if (t.offset + t.nbytes > size) __builtin_trap();  // validated ranges must lie inside the input
  } catch (const k3::Error&) {
  }
  return 0;
}
