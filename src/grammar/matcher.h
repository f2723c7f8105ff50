// Per-sequence grammar state over a shared CompiledGrammar: the token mask for the next step, and
// advancing by a sampled token. Not thread-safe; copy it (cheap: the parser stacks and a bounded
// history) to branch, or roll back accepted tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/pda.h"

namespace k3::grammar {

struct MatcherOptions {
  // Token ids allowed (and accepted, ending the match) once the grammar can end: the sequence's
  // end-of-message / EOS ids.
  std::vector<uint32_t> stop_ids;
  // How many accepted tokens rollback() can undo.
  size_t max_rollback = 64;
};

class Matcher {
 public:
  Matcher(std::shared_ptr<const CompiledGrammar> grammar, MatcherOptions options = {});

  // Words of the bitmask fill_mask writes: ceil(vocabulary size / 32).
  size_t mask_words() const { return grammar_->mask_words(); }
  // Writes bitmask[0 .. mask_words()): bit (id % 32) of word id / 32 is set iff token id may come
  // next. Stop ids are set when the grammar can end here; after termination only they are set.
  // Throws k3::Error when the span is shorter than mask_words().
  void fill_mask(std::span<uint32_t> bitmask) const;

  // Advances by one token. Returns false and leaves the state unchanged when the token is not
  // allowed. A stop id accepted while the grammar can end terminates the matcher.
  bool accept(uint32_t token_id);
  // Advances by text (the bytes of ordinary tokens): false, state unchanged, when refused.
  bool accept_text(std::string_view bytes);
  // Undoes the last n accepted tokens (accept_text counts as one); n ≤ rollback_depth().
  void rollback(size_t n);
  size_t rollback_depth() const { return history_.size(); }

  // The grammar allows ending here (a stop id would be accepted).
  bool can_end() const;
  // Nothing but ending is possible.
  bool is_completed() const;
  // A stop id has been accepted.
  bool is_terminated() const { return terminated_; }
  // Fewest bytes (a special token counts 1) that would let the grammar end: a guide for forcing
  // completion near a length limit.
  size_t min_remaining_bytes() const;
  // What accepting `token_id` would lead to, or nullopt when it is not allowed now. Leaves the
  // state as it is.
  struct Lookahead {
    bool terminates = false;   // a stop id that would end the match
    size_t min_remaining_bytes = 0;  // of the state after it (0 when it terminates)
  };
  std::optional<Lookahead> look_ahead(uint32_t token_id);

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  bool advance_bytes(std::string_view bytes, std::vector<uint32_t>& out);
  // The entries after an ordinary or special token (not a stop), its nodes added to the pool;
  // false when the grammar refuses it.
  bool advance_token(uint32_t token_id, std::vector<uint32_t>& out);
  bool is_stop(uint32_t token_id) const;
  size_t fewest_bytes_to_end(std::span<const uint32_t> entries) const;
  void commit(std::vector<uint32_t> entries, bool terminated, size_t pool_before);
  void compact();

  struct Saved {
    std::vector<uint32_t> entries;
    size_t pool_size;
    bool terminated;
  };

  std::shared_ptr<const CompiledGrammar> grammar_;
  MatcherOptions options_;
  mutable std::vector<Node> pool_;  // fill_mask appends scratch nodes and removes them
  std::vector<uint32_t> entries_;
  bool terminated_ = false;
  std::deque<Saved> history_;
  size_t live_after_compact_ = 0;
  // Scratch for fill_mask / accept.
  mutable Stepper stepper_;
  mutable std::vector<uint32_t> scratch_ids_;
  mutable std::vector<uint32_t> buf_;
};

}  // namespace k3::grammar
