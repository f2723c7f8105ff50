// The pushdown automaton over a FlatGrammar (internal to src/grammar). A parser stack is a chain
// of nodes in a pool: a node holds the position its frame will match next and its parent frame.
// A set of stacks (the parser state) is a list of entries: a node id, or kComplete (the grammar
// has ended), each with an optional flag bit. Stacks rest after a byte with their top at a
// position that is not an alternative's end (ends are popped eagerly); rule references are
// expanded lazily, only into alternatives whose first bytes admit the next terminal.
//
// For compile-time classification a stack may bottom out in a context node CTX(r): "rule r is
// being matched, what is below is unknown". Popping it continues at every position that can
// follow r (FlatGrammar::exits); when there is more than one way to continue, the entries made
// that way carry kFlag: they exist in some context, not necessarily in all.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/flat_grammar.h"
#include "grammar/vocabulary.h"

namespace k3::grammar {

struct Node {
  uint32_t pos;     // a position, or kCtx | rule for a context node
  uint32_t parent;  // kNoNode at the bottom of a real stack
};

inline constexpr uint32_t kNoNode = 0xFFFFFFFFu;
inline constexpr uint32_t kCtx = 0x80000000u;
inline constexpr uint32_t kFlag = 0x80000000u;       // entry bit
inline constexpr uint32_t kComplete = 0x7FFFFFFFu;   // entry: the grammar has ended
inline constexpr uint32_t kIdMask = 0x7FFFFFFFu;

// A pool whose first num_rules nodes are the context nodes CTX(r) (node id r).
std::vector<Node> make_pool(const FlatGrammar& g);

class Stepper {
 public:
  // special_ids[i]: the token id of grammar special i (FlatGrammar::specials).
  Stepper(const FlatGrammar& g, std::vector<uint32_t> special_ids);

  // Terminal numbering: a byte b is b; grammar special i is 256 + i.
  static constexpr uint32_t kSpecialBase = 256;
  // The terminal of a special token id, or UINT32_MAX when the grammar never uses it.
  uint32_t special_terminal(uint32_t token_id) const;

  // Appends to buf the entries that follow buf[begin, end) after terminal t (deduplicated); new
  // nodes go to the end of pool.
  void advance(std::vector<uint32_t>& buf, size_t begin, size_t end, uint32_t t, std::vector<Node>& pool);

  // Walks the trie from the entries `start`: a token whose bytes leave some entry goes to
  // `accepted` when one of them carries no flag, else to `uncertain` (when not null; otherwise to
  // accepted too). Ids come out in trie order. The pool is restored to its size on entry.
  void walk(const TokenTrie& trie, std::span<const uint32_t> start, std::vector<Node>& pool,
            std::vector<uint32_t>& accepted, std::vector<uint32_t>* uncertain);

  const FlatGrammar& grammar() const { return *g_; }

  // With a table, nodes are hash-consed: an existing (pos, parent) node is reused from anywhere in
  // the pool (the pool then must never be truncated), so that equal stacks are equal ids.
  void set_consing(std::unordered_map<uint64_t, uint32_t>* table) { cons_ = table; }

 private:
  bool may_start(uint32_t pos) const {
    return t_ < kSpecialBase ? (g_->first[pos].has(t_) || g_->nullable[pos])
                             : (((g_->first_specials[pos] >> (t_ - kSpecialBase)) & 1) || g_->nullable[pos]);
  }
  void descend(uint32_t pos, uint32_t parent, uint32_t flag);
  void pop_context(uint32_t rule, uint32_t flag);
  void emit(uint32_t pos, uint32_t parent, uint32_t flag);
  uint32_t alloc(uint32_t pos, uint32_t parent);

  const FlatGrammar* g_;
  std::vector<uint32_t> special_ids_;
  std::unordered_map<uint64_t, uint32_t>* cons_ = nullptr;
  // Per advance():
  uint32_t t_ = 0;
  std::vector<uint32_t>* out_ = nullptr;
  size_t out_begin_ = 0;
  std::vector<Node>* pool_ = nullptr;
  size_t pool_begin_ = 0;
  std::vector<uint32_t> ctx_seen_;  // per rule and flag: the advance() generation that popped it
  uint32_t generation_ = 0;
  // Per walk(): the entries of each trie depth.
  std::vector<uint32_t> buf_;
  std::vector<size_t> level_begin_, level_end_, level_pool_;
};

}  // namespace k3::grammar
