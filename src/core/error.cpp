#include "core/error.h"

#include <cstdio>

namespace k3 {
namespace {

// Length of the valid UTF-8 sequence starting at s[0], or 0.
size_t utf8_length(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b = byte(0);
  size_t n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
  if (b >= 0xF5 || n == 0 || s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i)
    if ((byte(i) & 0xC0) != 0x80) return 0;
  if ((b == 0xE0 && byte(1) < 0xA0) || (b == 0xED && byte(1) >= 0xA0) || (b == 0xF0 && byte(1) < 0x90) ||
      (b == 0xF4 && byte(1) >= 0x90))
    return 0;  // overlong, surrogate, beyond U+10FFFF
  return n;
}

}  // namespace

namespace {

// `bytes` with control bytes, DEL and bytes that are not valid UTF-8 (and, with quotes, '\'' and
// '\\') written as \xNN; at most max_bytes of the input, never cutting a character. Sets *cut when
// input was left out.
std::string escape_bytes(std::string_view bytes, size_t max_bytes, bool quotes, bool* cut) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  size_t i = 0;
  while (i < bytes.size() && i < max_bytes) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7F && !(quotes && (c == '\'' || c == '\\'))) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const size_t n = c >= 0x80 ? utf8_length(bytes.substr(i)) : 0;
    if (n > 0 && i + n <= max_bytes) {
      out.append(bytes.substr(i, n));
      i += n;
    } else if (n > 0) {
      break;  // a character that does not fit: cut before it
    } else {
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 15];
      ++i;
    }
  }
  if (cut) *cut = i < bytes.size();
  return out;
}

}  // namespace

std::string short_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

std::string quote_bytes(std::string_view bytes, size_t max_bytes) {
  bool cut = false;
  std::string out = "'";
  out += escape_bytes(bytes, max_bytes, true, &cut);
  out += "'";
  if (cut) out += "...";
  return out;
}

std::string format_error(const Where& where, const std::string& message) {
  std::string out;
  auto append = [&out](const std::string& part) {
    if (!out.empty()) out += ": ";
    out += part;
  };
  if (!where.file.empty()) append(where.file);
  // Tensor names and field paths come from files: their control bytes never reach the terminal.
  constexpr size_t kMaxName = 256;
  auto name = [](const std::string& text) {
    bool cut = false;
    std::string out = escape_bytes(text, kMaxName, false, &cut);
    if (cut) out += "...";
    return out;
  };
  if (!where.tensor.empty()) append("tensor '" + name(where.tensor) + "'");
  if (!where.field.empty()) append("field '" + name(where.field) + "'");
  append(message);
  return out;
}

Error::Error(const Where& where, const std::string& message)
    : std::runtime_error(format_error(where, message)), where_(where), detail_(message) {}

}  // namespace k3
