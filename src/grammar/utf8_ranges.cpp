#include "grammar/flat_grammar.h"

namespace k3::grammar {
namespace {

int encoded_length(char32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void encode(char32_t cp, uint8_t* out) {
  switch (encoded_length(cp)) {
    case 1: out[0] = static_cast<uint8_t>(cp); break;
    case 2:
      out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    case 3:
      out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    default:
      out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
      out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
}

// Splits [lo, hi] until each piece is a product of byte ranges (the regex-syntax construction).
void split(char32_t lo, char32_t hi, std::vector<std::vector<ByteRange>>& out) {
  if (lo > hi) return;
  static constexpr char32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (char32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      split(lo, end, out);
      split(end + 1, hi, out);
      return;
    }
  }
  const int n = encoded_length(lo);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  std::vector<ByteRange> seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<std::vector<ByteRange>> utf8_sequences(char32_t lo, char32_t hi) {
  // Surrogates (U+D800..U+DFFF) have no UTF-8 form: never match their 3-byte encodings.
  std::vector<std::vector<ByteRange>> out;
  if (lo < 0xD800 && hi >= 0xD800) {
    split(lo, 0xD7FF, out);
    if (hi > 0xDFFF) split(0xE000, hi, out);
  } else if (lo <= 0xDFFF && hi >= 0xD800) {
    if (hi > 0xDFFF) split(0xE000, hi, out);
  } else {
    split(lo, hi, out);
  }
  return out;
}

}  // namespace k3::grammar
