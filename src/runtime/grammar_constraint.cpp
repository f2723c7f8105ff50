#include "runtime/grammar_constraint.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace k3 {

namespace {

grammar::MatcherOptions matcher_options(const std::vector<int64_t>& stop_ids) {
  grammar::MatcherOptions o;
  for (int64_t id : stop_ids) o.stop_ids.push_back(static_cast<uint32_t>(id));
  return o;
}

bool allowed_bit(std::span<const uint32_t> allowed, uint32_t id) {
  return id / 32 < allowed.size() && ((allowed[id / 32] >> (id % 32)) & 1u);
}

}  // namespace

GrammarConstraint::GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                                     const std::vector<int64_t>& stop_ids)
    : matcher_(std::move(grammar), matcher_options(stop_ids)) {
  // The trie's top-level nodes are the one-byte strings; their tokens are the single-byte ones.
  const grammar::TokenTrie& trie = matcher_.grammar().vocab().trie();
  for (size_t node = 0; node < trie.size(); node = trie.end[node]) {
    for (uint32_t k = trie.tok_begin[node]; k < trie.tok_begin[node + 1]; ++k) closing_candidates_.push_back(trie.ids[k]);
  }
  for (uint32_t id : matcher_.grammar().special_ids()) closing_candidates_.push_back(id);
  for (int64_t id : stop_ids) closing_candidates_.push_back(static_cast<uint32_t>(id));
  std::sort(closing_candidates_.begin(), closing_candidates_.end());
  closing_candidates_.erase(std::unique(closing_candidates_.begin(), closing_candidates_.end()), closing_candidates_.end());
}

int64_t GrammarConstraint::tokens_needed() const {
  if (matcher_.is_terminated()) return 0;
  const size_t bytes = matcher_.min_remaining_bytes();
  return bytes >= static_cast<size_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(bytes) + 1;
}

void GrammarConstraint::require_budget(int64_t max_tokens, const std::string& field) const {
  if (tokens_needed() <= max_tokens) return;
  throw Error(Where{"", "", field}, std::to_string(max_tokens) + " is below the " + std::to_string(tokens_needed()) +
                                        " tokens of the shortest reply the grammar allows");
}

void GrammarConstraint::allowed_tokens(std::span<uint32_t> allowed, int64_t tokens_left) {
  matcher_.fill_mask(allowed);
  if (tokens_left - kClosingSlack <= tokens_needed()) keep_fitting(allowed, tokens_left);
}

bool GrammarConstraint::fits(int64_t id, int64_t tokens_left) {
  if (id < 0 || id > UINT32_MAX) return false;
  const std::optional<grammar::Matcher::Lookahead> after = matcher_.look_ahead(static_cast<uint32_t>(id));
  if (!after) return false;
  if (after->terminates) return true;
  // After `id`: the bytes still needed, then the stop token, within the tokens_left − 1 that remain.
  const bool ok = after->min_remaining_bytes < static_cast<size_t>(std::max<int64_t>(tokens_left - 1, 0));
  if (!ok) steered_ = true;
  return ok;
}

void GrammarConstraint::keep_fitting(std::span<uint32_t> allowed, int64_t tokens_left) {
  std::vector<uint32_t> kept;
  for (uint32_t id : closing_candidates_)
    if (allowed_bit(allowed, id) && fits(id, tokens_left)) kept.push_back(id);
  std::fill(allowed.begin(), allowed.end(), 0u);
  for (uint32_t id : kept) allowed[id / 32] |= 1u << (id % 32);
  steered_ = true;
}

void GrammarConstraint::accept(int64_t id) {
  if (id < 0 || id > UINT32_MAX || !matcher_.accept(static_cast<uint32_t>(id))) {
    throw Error(Where{"", "", "grammar"}, "token " + std::to_string(id) + " is not allowed here");
  }
}

}  // namespace k3
