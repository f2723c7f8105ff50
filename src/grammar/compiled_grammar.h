// A grammar bound to a vocabulary: the flat automaton plus, for every position where a parser
// stack can rest, the tokens decided by that position alone. Immutable once built; share it
// between sequences (Matcher) through shared_ptr.
//
// For a position p the compiler walks the vocabulary trie from a stack [p | CTX(rule of p)]:
//   accepted   — some way through the token never needs more than the rule of p and the places
//                it can only return to: allowed whatever the stack below holds;
//   rejected   — no way through even with every place the rule can return to: never allowed;
//   uncertain  — only ways that assume one of several return places: checked at run time against
//                the real stack (a small trie of its own).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar/flat_grammar.h"
#include "grammar/grammar_ir.h"
#include "grammar/vocabulary.h"

namespace k3::grammar {

struct CompileOptions {
  unsigned threads = 0;  // 0: all hardware threads (at most 16)
};

struct CompileStats {
  size_t positions = 0;        // positions classified
  size_t uncertain_tokens = 0; // summed over positions
  size_t dense_sets = 0;       // distinct accepted sets stored as bitsets
  size_t memory_bytes = 0;
  double seconds = 0;
};

class CompiledGrammar {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Slot {
    uint32_t dense = kNone;           // index of a bitset of accepted tokens, or
    uint32_t sparse_begin = 0;        // accepted ids sparse[sparse_begin .. sparse_end)
    uint32_t sparse_end = 0;
    uint32_t uncertain = kNone;       // index into uncertain tries
  };

  // Throws k3::Error when the grammar names a special token the vocabulary lacks, and for the
  // errors of lower_grammar.
  static std::shared_ptr<const CompiledGrammar> compile(const Grammar& grammar,
                                                         std::shared_ptr<const TokenVocabulary> vocab,
                                                         CompileOptions options = {});

  const FlatGrammar& flat() const { return flat_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  const std::vector<uint32_t>& special_ids() const { return special_ids_; }
  const Slot& slot(uint32_t pos) const { return slots_[slot_of_[pos]]; }
  std::span<const uint32_t> dense(uint32_t index) const {
    return std::span<const uint32_t>(dense_).subspan(size_t{index} * mask_words(), mask_words());
  }
  std::span<const uint32_t> sparse(const Slot& s) const {
    return std::span<const uint32_t>(sparse_).subspan(s.sparse_begin, s.sparse_end - s.sparse_begin);
  }
  const TokenTrie& uncertain(uint32_t index) const { return uncertain_[index]; }
  size_t mask_words() const { return (vocab_->size() + 31) / 32; }
  const CompileStats& stats() const { return stats_; }

 private:
  CompiledGrammar() = default;

  std::shared_ptr<const TokenVocabulary> vocab_;
  FlatGrammar flat_;
  std::vector<uint32_t> special_ids_;
  std::vector<uint32_t> slot_of_;  // per position; kNone where no stack rests
  std::vector<Slot> slots_;
  std::vector<uint32_t> dense_;    // mask_words() per bitset
  std::vector<uint32_t> sparse_;
  std::vector<TokenTrie> uncertain_;
  CompileStats stats_;
};

}  // namespace k3::grammar
