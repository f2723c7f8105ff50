// GBNF text → Grammar IR (grammar_ir.h). A recursive-descent parser over bytes that reports errors
// as "grammar:LINE:COL: message".
#include <map>

#include "core/error.h"
#include "grammar/grammar_ir.h"
#include "tokenizer/utf8.h"

namespace k3::grammar {
namespace {

constexpr uint32_t kMaxRepeat = 10000;

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Grammar parse(std::string_view root) {
    Grammar g;
    g.root = root;
    skip_blank(true);
    while (pos_ < s_.size()) {
      const size_t at = pos_;
      const std::string name = parse_name();
      if (name.empty()) fail(at, "expected a rule name");
      skip_blank(false);
      if (s_.substr(pos_, 3) != "::=") fail(pos_, "expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      if (g.find(name)) fail(at, "rule '" + name + "' is defined twice");
      Expr body = parse_alternatives(false);
      if (pos_ < s_.size() && s_[pos_] == ')') fail(pos_, "unbalanced ')'");
      g.rules.push_back({name, std::move(body)});
      skip_blank(true);
    }
    size_t bad = std::string_view::npos;
    std::string bad_name;
    for (const auto& [name, at] : refs_) {
      if (!g.find(name) && at < bad) {
        bad = at;
        bad_name = name;
      }
    }
    if (bad != std::string_view::npos) fail(bad, "undefined rule '" + bad_name + "'");
    if (!g.find(root)) fail(0, "no rule named '" + std::string(root) + "'");
    return g;
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& message) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(s_[i]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    throw Error("grammar:" + std::to_string(line) + ":" + std::to_string(col) + ": " + message);
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < s_.size() && name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  // Skips spaces, tabs and comments; newlines too when `newlines`.
  void skip_blank(bool newlines) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // At top level a newline ends the rule when the next content starts another rule or the text ends.
  bool at_rule_end() {
    const size_t save = pos_;
    skip_blank(true);
    bool end = pos_ >= s_.size();
    if (!end) {
      size_t p = pos_;
      while (p < s_.size() && name_char(s_[p])) ++p;
      if (p > pos_) {
        while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
        end = s_.substr(p, 3) == "::=";
      }
    }
    pos_ = save;
    return end;
  }

  Expr parse_alternatives(bool nested) {
    std::vector<Expr> alts;
    alts.push_back(parse_sequence(nested));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      skip_blank(true);
      alts.push_back(parse_sequence(nested));
    }
    return alt(std::move(alts));
  }

  Expr parse_sequence(bool nested) {
    std::vector<Expr> items;
    for (;;) {
      skip_blank(nested);
      if (pos_ >= s_.size()) break;
      const char c = s_[pos_];
      if (c == '\n' || c == '\r') {
        if (at_rule_end()) break;
        skip_blank(true);
        continue;
      }
      if (c == '|' || c == ')') break;
      Expr term = parse_term();
      items.push_back(parse_quantifiers(std::move(term)));
    }
    return seq(std::move(items));
  }

  Expr parse_quantifiers(Expr term) {
    for (;;) {
      if (pos_ >= s_.size()) return term;
      const char c = s_[pos_];
      if (c == '*') {
        ++pos_;
        term = star(std::move(term));
      } else if (c == '+') {
        ++pos_;
        term = plus(std::move(term));
      } else if (c == '?') {
        ++pos_;
        term = opt(std::move(term));
      } else if (c == '{') {
        const size_t at = pos_++;
        skip_blank(false);
        const uint32_t lo = pos_ < s_.size() && s_[pos_] == ',' ? 0 : parse_count(at);
        uint32_t hi = lo;
        skip_blank(false);
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          skip_blank(false);
          hi = pos_ < s_.size() && s_[pos_] == '}' ? Expr::kUnbounded : parse_count(at);
          skip_blank(false);
        }
        if (pos_ >= s_.size() || s_[pos_] != '}') fail(pos_, "expected '}' to close the repetition");
        ++pos_;
        if (hi < lo) fail(at, "repetition {" + std::to_string(lo) + "," + std::to_string(hi) + "}: max below min");
        term = repeat(std::move(term), lo, hi);
      } else {
        return term;
      }
    }
  }

  uint32_t parse_count(size_t at) {
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + static_cast<uint64_t>(s_[pos_] - '0');
      if (v > kMaxRepeat) fail(start, "repetition count above " + std::to_string(kMaxRepeat));
      ++pos_;
    }
    if (pos_ == start) fail(pos_, "expected a repetition count");
    return static_cast<uint32_t>(v);
  }

  Expr parse_term() {
    const size_t at = pos_;
    const char c = s_[pos_];
    if (c == '"') {
      ++pos_;
      std::string text;
      for (;;) {
        if (pos_ >= s_.size() || s_[pos_] == '\n') fail(at, "unterminated string literal");
        if (s_[pos_] == '"') break;
        utf8::append(text, parse_char());
      }
      ++pos_;
      return lit(text);
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return any_char();
    }
    if (c == '(') {
      ++pos_;
      skip_blank(true);
      Expr inner = parse_alternatives(true);
      if (pos_ >= s_.size() || s_[pos_] != ')') fail(at, "unbalanced '('");
      ++pos_;
      return inner;
    }
    if (s_.substr(pos_, 2) == "<|") {
      const size_t close = s_.find("|>", pos_ + 2);
      if (close == std::string_view::npos) fail(at, "unterminated special token '<|'");
      const std::string_view inner = s_.substr(pos_ + 2, close - pos_ - 2);
      if (inner.empty() || inner.find_first_of(" \t\r\n") != std::string_view::npos)
        fail(at, "bad special token name");
      pos_ = close + 2;
      return special(std::string(s_.substr(at, pos_ - at)));
    }
    if (name_char(c)) {
      std::string name = parse_name();
      refs_.emplace(name, at);
      return rule_ref(name);
    }
    fail(at, std::string("unexpected '") + (static_cast<unsigned char>(c) >= 0x20 && c != 0x7F ? std::string(1, c) : "?") + "'");
  }

  Expr parse_class() {
    const size_t at = pos_++;
    bool negate = false;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<CodeRange> ranges;
    for (;;) {
      if (pos_ >= s_.size() || s_[pos_] == '\n') fail(at, "unterminated character class");
      if (s_[pos_] == ']') break;
      const char32_t lo = parse_char();
      char32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail(at, "character class range out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    try {
      return cls(std::move(ranges), negate);
    } catch (const Error&) {
      fail(at, "character class matches no character");
    }
  }

  // One character of a literal or class: an escape or a UTF-8 encoded code point.
  char32_t parse_char() {
    const size_t at = pos_;
    if (s_[pos_] != '\\') {
      const utf8::Scan scan = utf8::scan(s_.substr(pos_));
      if (scan.kind != utf8::Kind::kValid) fail(at, "invalid UTF-8");
      size_t i = pos_;
      const char32_t cp = utf8::next(s_, i);
      pos_ = i;
      return cp;
    }
    if (++pos_ >= s_.size()) fail(at, "unterminated escape");
    const char e = s_[pos_++];
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.': case '|':
        return static_cast<char32_t>(e);
      case 'x': return parse_hex(at, 2);
      case 'u': return parse_hex(at, 4);
      case 'U': return parse_hex(at, 8);
      default: fail(at, std::string("unknown escape '\\") + (static_cast<unsigned char>(e) >= 0x20 ? std::string(1, e) : "?") + "'");
    }
  }

  char32_t parse_hex(size_t at, int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (pos_ >= s_.size()) fail(at, "truncated hex escape");
      const char c = s_[pos_++];
      uint32_t d;
      if (c >= '0' && c <= '9') d = static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<uint32_t>(c - 'A' + 10);
      else fail(pos_ - 1, "bad hex digit in escape");
      v = v * 16 + d;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) fail(at, "escape is not a Unicode scalar value");
    return v;
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::map<std::string, size_t> refs_;  // first reference of each name
};

}  // namespace

Grammar parse_gbnf(std::string_view text, std::string_view root) { return Parser(text).parse(root); }

}  // namespace k3::grammar
