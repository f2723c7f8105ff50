#include "grammar/regex.h"

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace k3::grammar {
namespace {

constexpr uint32_t kMaxRegexRepeat = 1000;

const std::vector<CodeRange> kDigit = {{'0', '9'}};
const std::vector<CodeRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
// ECMAScript WhiteSpace and LineTerminator.
const std::vector<CodeRange> kSpace = {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                                       {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                       {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const std::vector<CodeRange> kNotLineTerminator = normalize_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true);

class RegexParser {
 public:
  explicit RegexParser(std::string_view s) : s_(s) {}

  RegexExpr parse() {
    RegexExpr r;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      r.anchored_start = true;
      ++pos_;
    }
    r.expr = parse_alternatives(0);
    if (pos_ < s_.size()) fail("unbalanced ')'");
    r.anchored_end = end_anchor_;
    if ((r.anchored_start || r.anchored_end) && r.expr.kind == Expr::Kind::kAlt)
      fail("an anchor applies to one top-level alternative only: group the alternatives, as in ^(a|b)$");
    return r;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw Error("regex: offset " + std::to_string(pos_) + ": " + message);
  }

  Expr parse_alternatives(int depth) {
    if (depth > 64) fail("groups nested too deeply");
    std::vector<Expr> alts;
    alts.push_back(parse_sequence(depth));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      alts.push_back(parse_sequence(depth));
    }
    return alt(std::move(alts));
  }

  Expr parse_sequence(int depth) {
    std::vector<Expr> items;
    while (pos_ < s_.size() && s_[pos_] != '|' && s_[pos_] != ')') {
      if (s_[pos_] == '$') {
        ++pos_;
        if (depth != 0 || pos_ != s_.size()) fail("'$' is supported only at the end");
        end_anchor_ = true;
        break;
      }
      if (s_[pos_] == '^') fail("'^' is supported only at the start");
      Expr atom = parse_atom(depth);
      items.push_back(parse_quantifier(std::move(atom)));
    }
    return seq(std::move(items));
  }

  Expr parse_quantifier(Expr atom) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      uint32_t lo, hi;
      if (c == '*') {
        lo = 0, hi = Expr::kUnbounded, ++pos_;
      } else if (c == '+') {
        lo = 1, hi = Expr::kUnbounded, ++pos_;
      } else if (c == '?') {
        lo = 0, hi = 1, ++pos_;
      } else if (c == '{' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9') {
        ++pos_;
        lo = hi = count();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          hi = pos_ < s_.size() && s_[pos_] == '}' ? Expr::kUnbounded : count();
        }
        if (pos_ >= s_.size() || s_[pos_] != '}') fail("expected '}'");
        ++pos_;
        if (hi < lo) fail("repetition max below min");
      } else {
        return atom;
      }
      if (pos_ < s_.size() && s_[pos_] == '?') ++pos_;  // lazy: the same strings
      atom = repeat(std::move(atom), lo, hi);
    }
    return atom;
  }

  uint32_t count() {
    uint64_t v = 0;
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + static_cast<uint64_t>(s_[pos_++] - '0');
      if (v > kMaxRegexRepeat) fail("repetition count above " + std::to_string(kMaxRegexRepeat));
    }
    if (pos_ == start) fail("expected a number");
    return static_cast<uint32_t>(v);
  }

  Expr parse_atom(int depth) {
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      if (pos_ < s_.size() && s_[pos_] == '?') {
        if (pos_ + 1 < s_.size() && s_[pos_ + 1] == ':') {
          pos_ += 2;
        } else {
          fail("lookaround and named groups are not supported");
        }
      }
      Expr inner = parse_alternatives(depth + 1);
      if (pos_ >= s_.size() || s_[pos_] != ')') fail("unbalanced '('");
      ++pos_;
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return cls(kNotLineTerminator);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("nothing to repeat");
    if (c == '\\') {
      std::vector<CodeRange> ranges;
      if (class_escape(ranges)) return cls(std::move(ranges));
      std::string text;
      utf8::append(text, char_escape());
      return lit(text);
    }
    std::string text;
    utf8::append(text, literal_char());
    return lit(text);
  }

  char32_t literal_char() {
    const utf8::Scan scan = utf8::scan(s_.substr(pos_));
    if (scan.kind != utf8::Kind::kValid) fail("invalid UTF-8");
    size_t i = pos_;
    const char32_t cp = utf8::next(s_, i);
    pos_ = i;
    return cp;
  }

  // \d \w \s and their negations (at s_[pos_] == '\\'); true when one was read.
  bool class_escape(std::vector<CodeRange>& out) {
    if (pos_ + 1 >= s_.size()) return false;
    const char e = s_[pos_ + 1];
    const std::vector<CodeRange>* set = nullptr;
    bool negate = false;
    switch (e) {
      case 'd': set = &kDigit; break;
      case 'D': set = &kDigit, negate = true; break;
      case 'w': set = &kWord; break;
      case 'W': set = &kWord, negate = true; break;
      case 's': set = &kSpace; break;
      case 'S': set = &kSpace, negate = true; break;
      default: return false;
    }
    pos_ += 2;
    const auto ranges = normalize_ranges(*set, negate);
    out.insert(out.end(), ranges.begin(), ranges.end());
    return true;
  }

  // One escaped character (at s_[pos_] == '\\').
  char32_t char_escape() {
    ++pos_;
    if (pos_ >= s_.size()) fail("trailing '\\'");
    const char e = s_[pos_++];
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': return hex(2);
      case 'u':
        if (pos_ < s_.size() && s_[pos_] == '{') {
          ++pos_;
          const size_t close = s_.find('}', pos_);
          if (close == std::string_view::npos || close == pos_ || close - pos_ > 6) fail("bad \\u{...} escape");
          const char32_t cp = hex(static_cast<int>(close - pos_));
          ++pos_;
          return cp;
        }
        return hex(4);
      case 'b': case 'B': fail("word boundaries are not supported");
      default:
        if ((e >= '1' && e <= '9') || e == 'k') fail("backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          fail(std::string("unknown escape '\\") + e + "'");
        --pos_;
        return literal_char();  // an escaped punctuation character stands for itself
    }
  }

  char32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (pos_ >= s_.size()) fail("truncated escape");
      const char c = s_[pos_++];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("bad hex digit");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    if (v > kMaxCodePoint) fail("escape above U+10FFFF");
    return v;
  }

  Expr parse_class() {
    ++pos_;
    bool negate = false;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<CodeRange> ranges;
    bool first = true;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated character class");
      if (s_[pos_] == ']' && !first) break;
      first = false;
      if (s_[pos_] == '\\' && class_escape(ranges)) continue;
      const char32_t lo = class_char();
      char32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (s_[pos_] == '\\' && pos_ + 1 < s_.size() && std::string_view("dDwWsS").find(s_[pos_ + 1]) != std::string_view::npos)
          fail("class escape as a range bound");
        hi = class_char();
        if (hi < lo) fail("class range out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    const auto normalized = normalize_ranges(std::move(ranges), negate);
    if (normalized.empty()) fail("character class matches nothing");
    return cls(normalized);
  }

  char32_t class_char() {
    if (s_[pos_] != '\\') return literal_char();
    if (pos_ + 1 < s_.size() && s_[pos_ + 1] == 'b') {
      pos_ += 2;
      return '\b';
    }
    if (pos_ + 1 < s_.size() && s_[pos_ + 1] == '-') {
      pos_ += 2;
      return '-';
    }
    return char_escape();
  }

  std::string_view s_;
  size_t pos_ = 0;
  bool end_anchor_ = false;
};

}  // namespace

RegexExpr parse_regex(std::string_view pattern) { return RegexParser(pattern).parse(); }

}  // namespace k3::grammar
