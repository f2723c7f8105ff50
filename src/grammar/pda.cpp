#include "grammar/pda.h"

#include <algorithm>

namespace k3::grammar {

using Kind = FlatGrammar::Kind;

std::vector<Node> make_pool(const FlatGrammar& g) {
  std::vector<Node> pool(g.num_rules());
  for (uint32_t r = 0; r < pool.size(); ++r) pool[r] = {kCtx | r, kNoNode};
  return pool;
}

Stepper::Stepper(const FlatGrammar& g, std::vector<uint32_t> special_ids)
    : g_(&g), special_ids_(std::move(special_ids)) {}

uint32_t Stepper::special_terminal(uint32_t token_id) const {
  for (uint32_t i = 0; i < special_ids_.size(); ++i)
    if (special_ids_[i] == token_id) return kSpecialBase + i;
  return UINT32_MAX;
}

uint32_t Stepper::alloc(uint32_t pos, uint32_t parent) {
  std::vector<Node>& pool = *pool_;
  if (cons_) {
    const auto [it, added] = cons_->emplace((uint64_t{pos} << 32) | parent, static_cast<uint32_t>(pool.size()));
    if (added) pool.push_back({pos, parent});
    return it->second;
  }
  for (size_t k = pool_begin_; k < pool.size(); ++k)
    if (pool[k].pos == pos && pool[k].parent == parent) return static_cast<uint32_t>(k);
  pool.push_back({pos, parent});
  return static_cast<uint32_t>(pool.size() - 1);
}

void Stepper::emit(uint32_t pos, uint32_t parent, uint32_t flag) {
  uint32_t id;
  if (g_->elements[pos].kind == Kind::kEnd) {
    // Ends pop eagerly; a parent frame always rests at a position that is not an end.
    id = parent == kNoNode ? kComplete : parent;
  } else {
    id = alloc(pos, parent);
  }
  const uint32_t entry = id | flag;
  std::vector<uint32_t>& out = *out_;
  for (size_t k = out_begin_; k < out.size(); ++k) {
    if ((out[k] & kIdMask) == id) {
      out[k] &= entry | kIdMask;  // an unflagged way in makes the entry unflagged
      return;
    }
  }
  out.push_back(entry);
}

void Stepper::pop_context(uint32_t rule, uint32_t flag) {
  if (g_->exit_options(rule) > 1) flag = kFlag;
  if (ctx_seen_.empty()) ctx_seen_.assign(2 * g_->num_rules(), 0);
  uint32_t& seen = ctx_seen_[2 * rule + (flag ? 1 : 0)];
  if (seen == generation_) return;
  seen = generation_;
  for (uint32_t k = g_->exit_index[rule]; k < g_->exit_index[rule + 1]; ++k) {
    const uint32_t x = g_->exits[k];
    if (may_start(x)) descend(x, g_->rule_of[x], flag);
  }
}

void Stepper::descend(uint32_t pos, uint32_t parent, uint32_t flag) {
  for (;;) {
    if (!may_start(pos)) return;
    const FlatGrammar::Element e = g_->elements[pos];
    switch (e.kind) {
      case Kind::kEnd: {
        if (parent == kNoNode) return;  // the grammar ends here: nothing consumes t
        const Node up = (*pool_)[parent];
        if (up.pos & kCtx) {
          pop_context(up.pos & ~kCtx, flag);
          return;
        }
        pos = up.pos;
        parent = up.parent;
        continue;
      }
      case Kind::kBytes:
        if (t_ < kSpecialBase && g_->byte_sets[e.arg].has(t_)) emit(pos + 1, parent, flag);
        return;
      case Kind::kSpecial:
        if (t_ == kSpecialBase + e.arg) emit(pos + 1, parent, flag);
        return;
      case Kind::kRef: {
        // A reference in tail position returns straight to the parent frame.
        const uint32_t ret = g_->elements[pos + 1].kind == Kind::kEnd ? parent : alloc(pos + 1, parent);
        for (uint32_t a = g_->alt_index[e.arg]; a < g_->alt_index[e.arg + 1]; ++a) descend(g_->alts[a], ret, flag);
        return;
      }
    }
  }
}

void Stepper::advance(std::vector<uint32_t>& buf, size_t begin, size_t end, uint32_t t, std::vector<Node>& pool) {
  t_ = t;
  out_ = &buf;
  out_begin_ = buf.size();
  pool_ = &pool;
  pool_begin_ = pool.size();
  if (++generation_ == 0) {
    std::fill(ctx_seen_.begin(), ctx_seen_.end(), 0);
    generation_ = 1;
  }
  for (size_t k = begin; k < end; ++k) {
    const uint32_t entry = buf[k];
    const uint32_t id = entry & kIdMask, flag = entry & kFlag;
    if (id == kComplete) continue;
    const Node n = pool[id];
    if (n.pos & kCtx) {
      pop_context(n.pos & ~kCtx, flag);
    } else {
      descend(n.pos, n.parent, flag);
    }
  }
}

void Stepper::walk(const TokenTrie& trie, std::span<const uint32_t> start, std::vector<Node>& pool,
                   std::vector<uint32_t>& accepted, std::vector<uint32_t>* uncertain) {
  const size_t levels = size_t{trie.max_depth} + 1;
  if (level_begin_.size() < levels) {
    level_begin_.resize(levels);
    level_end_.resize(levels);
    level_pool_.resize(levels);
  }
  buf_.assign(start.begin(), start.end());
  level_begin_[0] = 0;
  level_end_[0] = buf_.size();
  level_pool_[0] = pool.size();
  const size_t n = trie.size();
  for (size_t i = 0; i < n;) {
    const uint32_t d = trie.depth[i];
    buf_.resize(level_end_[d - 1]);
    pool.resize(level_pool_[d - 1]);
    const size_t begin = buf_.size();
    advance(buf_, level_begin_[d - 1], level_end_[d - 1], trie.byte[i], pool);
    if (buf_.size() == begin) {
      i = trie.end[i];
      continue;
    }
    level_begin_[d] = begin;
    level_end_[d] = buf_.size();
    level_pool_[d] = pool.size();
    if (trie.tok_begin[i] != trie.tok_begin[i + 1]) {
      bool sure = uncertain == nullptr;
      for (size_t k = begin; k < buf_.size() && !sure; ++k) sure = !(buf_[k] & kFlag);
      std::vector<uint32_t>& dst = sure ? accepted : *uncertain;
      for (uint32_t k = trie.tok_begin[i]; k < trie.tok_begin[i + 1]; ++k) dst.push_back(trie.ids[k]);
    }
    ++i;
  }
  pool.resize(level_pool_[0]);
}

}  // namespace k3::grammar
