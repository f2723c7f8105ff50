// The grammar IR: named rules over expressions (sequence, alternation, repetition, UTF-8 literals,
// code-point classes, rule references, special-token terminals). Produced by parse_gbnf and by the
// JSON Schema translator; lowered to the byte-level automaton by compile (compiled_grammar.h).
// Every terminal but kSpecial matches text; kSpecial matches only the special token of that name.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3::grammar {

// An inclusive code-point range.
struct CodeRange {
  char32_t lo = 0, hi = 0;
  bool operator==(const CodeRange&) const = default;
};

inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

struct Expr {
  enum class Kind : uint8_t { kSeq, kAlt, kLiteral, kClass, kRef, kSpecial, kRepeat };
  static constexpr uint32_t kUnbounded = UINT32_MAX;

  Kind kind = Kind::kSeq;         // an empty kSeq is the empty string
  std::string text;               // kLiteral: UTF-8 bytes; kRef: rule name; kSpecial: "<|name|>"
  std::vector<CodeRange> ranges;  // kClass: sorted, disjoint, not adjacent, no surrogates; never empty
  std::vector<Expr> items;        // kSeq, kAlt: the parts; kRepeat: exactly one
  uint32_t min = 0, max = 0;      // kRepeat bounds (max may be kUnbounded)
};

// Builders. They simplify as they go: seq/alt of one item is the item, a nested seq is flattened.
Expr empty();
Expr lit(std::string_view utf8);
Expr cls(std::vector<CodeRange> ranges, bool negate = false);  // throws k3::Error when empty
Expr any_char();
Expr rule_ref(std::string_view name);
Expr special(std::string_view name);
Expr seq(std::vector<Expr> items);
Expr alt(std::vector<Expr> items);
Expr repeat(Expr item, uint32_t min, uint32_t max);
inline Expr opt(Expr e) { return repeat(std::move(e), 0, 1); }
inline Expr star(Expr e) { return repeat(std::move(e), 0, Expr::kUnbounded); }
inline Expr plus(Expr e) { return repeat(std::move(e), 1, Expr::kUnbounded); }

// Sorts and merges ranges, drops surrogates, and complements over all scalar values when negate.
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges, bool negate);

struct Rule {
  std::string name;
  Expr body;
  // Never inlined: for rules referenced only in tail position, where a copy per use gains nothing.
  bool shared = false;
};

struct Grammar {
  std::vector<Rule> rules;  // names unique
  std::string root = "root";

  const Rule* find(std::string_view name) const;
  // Adds a rule; throws k3::Error when the name is taken.
  void add(std::string name, Expr body, bool shared = false);
  // GBNF text that parse_gbnf reads back to the same grammar.
  std::string to_gbnf() const;
};

// True for names usable as rule names in GBNF: [A-Za-z0-9_-]+.
bool is_rule_name(std::string_view name);

// Parses GBNF (docs/structured-outputs.md): `name ::= body` rules, `|`, `( )`, `* + ? {m} {m,} {m,n}`,
// "literals" and [classes] with escapes, `.`, `# comments`, and special-token terminals `<|name|>`.
// Errors are one-line k3::Error "grammar:LINE:COL: message". `root` names the start rule.
Grammar parse_gbnf(std::string_view text, std::string_view root = "root");

}  // namespace k3::grammar
