// Internal to src/grammar: the compile-time trie walk with memoized transitions. Stack nodes are
// hash-consed, so a parser state (a set of entries) has one canonical id; the successor of a state
// under a byte is computed once and then looked up, which makes a walk over the whole vocabulary
// mostly table lookups (a DFA built lazily over the states the vocabulary reaches).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "grammar/pda.h"

namespace k3::grammar {

class StateWalker {
 public:
  StateWalker(const FlatGrammar& g, std::vector<uint32_t> special_ids);

  // Classifies every token of the trie from the stack [pos | CTX(rule of pos)] (see
  // compiled_grammar.h): ids go to accepted or uncertain, in trie order.
  void classify(const TokenTrie& trie, uint32_t pos, std::vector<uint32_t>& accepted, std::vector<uint32_t>& uncertain);

 private:
  static constexpr int32_t kUnknown = -1, kDead = -2;
  int32_t intern(std::vector<uint32_t>& entries);
  int32_t next(int32_t state, uint8_t byte);
  void reset();

  const FlatGrammar* g_;
  Stepper stepper_;
  std::vector<Node> pool_;
  std::unordered_map<uint64_t, uint32_t> cons_;
  std::vector<uint32_t> entries_;      // of all states
  std::vector<uint32_t> state_begin_;  // state s: entries_[state_begin_[s] .. state_begin_[s + 1])
  std::vector<uint8_t> sure_;          // some entry of the state carries no flag
  std::vector<int32_t> trans_;         // 256 per state
  std::unordered_map<uint64_t, std::vector<int32_t>> by_hash_;
  std::vector<uint32_t> scratch_;
  std::vector<int32_t> level_;
};

}  // namespace k3::grammar
