// A grammar matcher (grammar/matcher.h) as the serving loop's TokenConstraint: structured outputs
// and forced tool calls through RequestSpec::constraint and GenerateOptions::constraint.
//
// Budget: the fewest tokens that still complete the grammar are taken as its fewest bytes to an
// end (Matcher::min_remaining_bytes, a special token counting one) plus the stop token — exact for
// byte-level vocabularies, where every byte is a token of its own. Within kClosingSlack tokens of
// that bound the mask holds only the single-byte and special tokens that fit, so the reply closes
// one byte at a time along a shortest completion while the model still picks among them.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "runtime/token_constraint.h"

namespace k3 {

class GrammarConstraint final : public TokenConstraint {
 public:
  // Tokens of slack between the budget and the fewest tokens the grammar still needs before the
  // mask narrows to the tokens that fit.
  static constexpr int64_t kClosingSlack = 8;

  // `stop_ids`: the tokens that end the reply once the grammar can end (the model's EOS ids).
  GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar, const std::vector<int64_t>& stop_ids);

  void allowed_tokens(std::span<uint32_t> allowed, int64_t tokens_left) override;
  bool fits(int64_t id, int64_t tokens_left) override;
  void keep_fitting(std::span<uint32_t> allowed, int64_t tokens_left) override;
  void accept(int64_t id) override;
  bool budget_steered() const override { return steered_; }

  // The fewest tokens a complete reply still needs, the stop token included (0 once ended).
  int64_t tokens_needed() const;
  // Throws k3::Error naming `field` when max_tokens is below tokens_needed(): no valid reply fits.
  void require_budget(int64_t max_tokens, const std::string& field) const;

 private:
  grammar::Matcher matcher_;
  std::vector<uint32_t> closing_candidates_;  // single-byte tokens, the grammar's specials, the stop ids
  bool steered_ = false;
};

}  // namespace k3
