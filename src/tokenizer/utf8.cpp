#include "tokenizer/utf8.h"

namespace k3::utf8 {

Scan scan(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return {Kind::kValid, 1};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // ≤ U+10FFFF
  } else {
    return {Kind::kInvalid, 1};
  }
  for (size_t k = 1; k < need; ++k) {
    if (k == s.size()) return {Kind::kTruncated, k};
    const auto b = static_cast<unsigned char>(s[k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {Kind::kInvalid, k};
  }
  return {Kind::kValid, need};
}

size_t first_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Scan r = scan(s.substr(i));
    if (r.kind != Kind::kValid) return i;
    i += r.length;
  }
  return std::string_view::npos;
}

std::string replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Scan r = scan(s.substr(i));
    if (r.kind == Kind::kValid) {
      out.append(s.substr(i, r.length));
    } else {
      out.append(kReplacement);
    }
    i += r.length;
  }
  return out;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

char32_t next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

std::string Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const Scan r = scan(std::string_view(pending_).substr(i));
    if (r.kind == Kind::kTruncated) break;  // may still complete
    out.append(r.kind == Kind::kValid ? std::string_view(pending_).substr(i, r.length) : kReplacement);
    i += r.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string Stream::flush() {
  std::string out = replace_invalid(pending_);
  pending_.clear();
  return out;
}

}  // namespace k3::utf8
