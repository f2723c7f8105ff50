// A grammar matcher (grammar/matcher.h) as the serving loop's TokenConstraint: structured outputs
// and forced tool calls through RequestSpec::constraint and GenerateOptions::constraint.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "grammar/matcher.h"
#include "runtime/token_constraint.h"

namespace k3 {

class GrammarConstraint final : public TokenConstraint {
 public:
  // `stop_ids`: the tokens that end the reply once the grammar can end (the model's EOS ids).
  GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar, const std::vector<int64_t>& stop_ids)
      : matcher_(std::move(grammar), options(stop_ids)) {}

  void allowed_tokens(std::span<uint32_t> allowed) override { matcher_.fill_mask(allowed); }
  void accept(int64_t id) override {
    if (id < 0 || id > UINT32_MAX || !matcher_.accept(static_cast<uint32_t>(id))) {
      throw Error(Where{"", "", "grammar"}, "token " + std::to_string(id) + " is not allowed here");
    }
  }

 private:
  static grammar::MatcherOptions options(const std::vector<int64_t>& stop_ids) {
    grammar::MatcherOptions o;
    for (int64_t id : stop_ids) o.stop_ids.push_back(static_cast<uint32_t>(id));
    return o;
  }
  grammar::Matcher matcher_;
};

}  // namespace k3
