#include "io/safetensors_detail.h"

#include <cstring>
#include <string_view>

namespace k3::safetensors_detail {

std::string shape_string(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

size_t first_invalid_utf8(std::span<const uint8_t> s) {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (n - i >= 8) {  // ASCII fast path
      uint64_t word;
      std::memcpy(&word, s.data() + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::string_view::npos;
}

void require_text(std::span<const uint8_t> text, const Where& where, const std::string& what) {
  size_t bad = first_invalid_utf8(text);
  if (bad != std::string_view::npos)
    throw Error(where, what + " is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  const void* nul = text.empty() ? nullptr : std::memchr(text.data(), 0, text.size());
  if (nul)
    throw Error(where, what + " contains a NUL byte (byte " +
                           std::to_string(static_cast<const uint8_t*>(nul) - text.data()) + ")");
}

}  // namespace k3::safetensors_detail
