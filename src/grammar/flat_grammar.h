// The byte-level form of a grammar that the automaton runs: each rule is a list of alternatives,
// each alternative a run of elements ending in kEnd. Terminals are byte sets (a code-point class
// becomes a rule over its UTF-8 byte sequences) and special tokens. A position is an index into
// `elements`; a parser stack is a chain of positions (pda.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar_ir.h"

namespace k3::grammar {

struct ByteSet {
  std::array<uint64_t, 4> w{};
  bool has(uint32_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void set(uint32_t b) { w[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint32_t lo, uint32_t hi) {
    for (uint32_t b = lo; b <= hi; ++b) set(b);
  }
  ByteSet& operator|=(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) w[i] |= o.w[i];
    return *this;
  }
  bool operator==(const ByteSet&) const = default;
};

struct FlatGrammar {
  enum class Kind : uint8_t { kEnd, kBytes, kRef, kSpecial };
  struct Element {
    Kind kind = Kind::kEnd;
    uint32_t arg = 0;  // kBytes: byte_sets index; kRef: rule id; kSpecial: specials index
  };
  static constexpr size_t kMaxSpecials = 64;

  std::vector<Element> elements;
  std::vector<uint32_t> rule_of;     // rule of each position
  std::vector<uint32_t> alt_index;   // rule r's alternatives are alts[alt_index[r] .. alt_index[r+1])
  std::vector<uint32_t> alts;        // first position of each alternative
  std::vector<std::string> rule_names;
  std::vector<ByteSet> byte_sets;
  std::vector<std::string> specials;  // "<|name|>" of each kSpecial arg
  uint32_t start_rule = 0;            // the synthetic rule `start ::= root`
  uint32_t start_pos = 0;             // its single position, REF(root)

  // Analysis of the rest of each position's alternative (analyze_flat_grammar):
  std::vector<ByteSet> first;           // bytes that can come first
  std::vector<uint64_t> first_specials; // specials (bit = specials index) that can come first
  std::vector<uint8_t> nullable;        // the rest can match nothing
  std::vector<uint32_t> min_bytes;      // fewest bytes that finish it (a special counts 1)
  // What follows when rule r completes: the positions exits[exit_index[r] .. exit_index[r+1]) (never
  // kEnd) and, when exits_to_end[r], the end of the whole grammar.
  std::vector<uint32_t> exit_index;
  std::vector<uint32_t> exits;
  std::vector<uint8_t> exits_to_end;

  // A counted repetition lowered as levels of identical layout: level k (1-based) occupies
  // positions [first + (k-1)·stride, first + k·stride) and allows k more items. (Before layout,
  // lowering keeps rule ids in these fields.)
  struct Chain {
    uint32_t first = 0, stride = 0, levels = 0;
  };
  std::vector<Chain> chains;
  // Per rule: the rule whose context node stands for it (the rule it returns into through a tail
  // position when that is its only return place), so that equal contexts share parser states.
  std::vector<uint32_t> context_rule;

  size_t num_rules() const { return alt_index.size() - 1; }
  size_t exit_options(uint32_t rule) const { return exit_index[rule + 1] - exit_index[rule] + exits_to_end[rule]; }
};

// Lowers the IR (grammar_ir.h): small rules that are not recursive are inlined at each use, so that
// most rules have one place to return to; repetitions become right-recursive helper rules. Then
// analyzes it. Throws k3::Error on left recursion, a rule that can never finish, or a grammar that
// lowers to more than a few million elements.
FlatGrammar lower_grammar(const Grammar& grammar);

// The byte sequences of the UTF-8 encodings of [lo, hi] (no surrogates inside): each sequence a
// list of byte ranges, one per byte.
struct ByteRange {
  uint8_t lo, hi;
};
std::vector<std::vector<ByteRange>> utf8_sequences(char32_t lo, char32_t hi);

}  // namespace k3::grammar
