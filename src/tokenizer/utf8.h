// UTF-8 scanning with the Unicode "maximal subpart" rule: every maximal invalid subpart of a byte
// string counts as one U+FFFD (as CPython errors="replace" and WHATWG decoders do).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace k3::utf8 {

enum class Kind { kValid, kInvalid, kTruncated };

// Classifies the sequence starting at s[0] (s non-empty): kValid with its length; kInvalid with the
// length of the maximal invalid subpart (≥1); kTruncated when s ends inside a sequence that could
// still become valid (length = bytes present).
struct Scan {
  Kind kind;
  size_t length;
};
Scan scan(std::string_view s);

// Offset of the first byte that is not part of a valid sequence, or std::string_view::npos.
size_t first_invalid(std::string_view s);

// The bytes with every maximal invalid subpart (a truncated tail included) replaced by U+FFFD.
std::string replace_invalid(std::string_view s);

// Appends the UTF-8 encoding of a scalar value.
void append(std::string& out, char32_t cp);

// Decodes the valid sequence at s[i] and advances i (s must be valid UTF-8 from i on).
char32_t next(std::string_view s, size_t& i);

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Streaming replace_invalid: bytes go in split anywhere; what comes out never ends inside a
// sequence that could still become valid (that tail waits), and all outputs joined, flush()
// included, equal replace_invalid(all bytes).
class Stream {
 public:
  std::string push(std::string_view bytes);
  std::string flush();  // the waiting tail as U+FFFD (nothing when none)

 private:
  std::string pending_;
};

}  // namespace k3::utf8
