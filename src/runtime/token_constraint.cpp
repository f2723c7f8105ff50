#include "runtime/token_constraint.h"

#include "runtime/sampler.h"

namespace k3 {

namespace {
// Refused draws before sampling among the tokens keep_fitting() keeps: a refusal costs a sampler
// pass over the vocabulary, keep_fitting() a matcher probe per candidate.
constexpr int kRefusedDrawsBeforeNarrowing = 4;
}  // namespace

int64_t sample_within_budget(Sampler& sampler, std::span<const float> logits, std::vector<uint32_t>& allowed,
                             TokenConstraint& constraint, int64_t tokens_left) {
  const auto any = [&allowed] {
    for (uint32_t w : allowed)
      if (w != 0) return true;
    return false;
  };
  for (int refused = 0; refused < kRefusedDrawsBeforeNarrowing && any(); ++refused) {
    const int64_t id = sampler.draw(logits, allowed);
    if (constraint.fits(id, tokens_left)) {
      sampler.observe(id);
      return id;
    }
    allowed[static_cast<size_t>(id) / 32] &= ~(1u << (id % 32));
  }
  constraint.keep_fitting(allowed, tokens_left);
  const int64_t id = sampler.draw(logits, allowed);
  sampler.observe(id);
  return id;
}

}  // namespace k3
