// A per-request restriction of which token may come next (grammar-constrained decoding: JSON
// schemas, grammars, forced tool calls). The scheduler asks for the allowed set before each sampled
// token — on a device backend overlapping the forward pass that produces the logits — and reports
// the token it chose.
#pragma once

#include <cstdint>
#include <span>

namespace k3 {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets bit i % 32 of allowed[i / 32] iff token i may come next; `allowed` covers the vocabulary
  // and arrives zeroed. May be called on a worker thread, never concurrently with accept().
  virtual void allowed_tokens(std::span<uint32_t> allowed) = 0;
  // Advances past `id`, which the last allowed_tokens() allowed.
  virtual void accept(int64_t id) = 0;
};

}  // namespace k3
