#include "grammar/matcher.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.h"

namespace k3::grammar {

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, MatcherOptions options)
    : grammar_(std::move(grammar)), options_(std::move(options)), stepper_(grammar_->flat(), grammar_->special_ids()) {
  const FlatGrammar& g = grammar_->flat();
  pool_ = make_pool(g);
  pool_.push_back({g.start_pos, kNoNode});
  entries_.push_back(static_cast<uint32_t>(pool_.size() - 1));
  live_after_compact_ = pool_.size();
  for (uint32_t id : options_.stop_ids)
    if (id >= grammar_->vocab().size())
      throw Error("grammar matcher: stop token id " + std::to_string(id) + " is outside the vocabulary");
}

void Matcher::fill_mask(std::span<uint32_t> bitmask) const {
  const size_t words = mask_words();
  if (bitmask.size() < words)
    throw Error("grammar mask: " + std::to_string(bitmask.size()) + " words given, " + std::to_string(words) + " needed");
  uint32_t* mask = bitmask.data();
  std::memset(mask, 0, words * 4);
  auto set = [mask](uint32_t id) { mask[id >> 5] |= 1u << (id & 31); };
  bool end = terminated_;
  if (!terminated_) {
    const FlatGrammar& g = grammar_->flat();
    const std::vector<uint32_t>& special_ids = grammar_->special_ids();
    for (const uint32_t entry : entries_) {
      const uint32_t id = entry & kIdMask;
      if (id == kComplete) {
        end = true;
        continue;
      }
      const uint32_t pos = pool_[id].pos;
      const CompiledGrammar::Slot& s = grammar_->slot(pos);
      if (s.dense != CompiledGrammar::kNone) {
        const uint32_t* bits = grammar_->dense(s.dense).data();
        for (size_t w = 0; w < words; ++w) mask[w] |= bits[w];
      } else {
        for (uint32_t t : grammar_->sparse(s)) set(t);
      }
      if (s.uncertain != CompiledGrammar::kNone) {
        scratch_ids_.clear();
        stepper_.walk(grammar_->uncertain(s.uncertain), std::span<const uint32_t>(&entry, 1), pool_, scratch_ids_, nullptr);
        for (uint32_t t : scratch_ids_) set(t);
      }
      // Special tokens that can come first, through the frames whose rest can be empty.
      for (uint32_t q = id;;) {
        const uint32_t p = pool_[q].pos;
        for (uint64_t bits = g.first_specials[p]; bits; bits &= bits - 1) set(special_ids[std::countr_zero(bits)]);
        if (!g.nullable[p]) break;
        q = pool_[q].parent;
        if (q == kNoNode) {
          end = true;
          break;
        }
      }
    }
  }
  if (end)
    for (uint32_t id : options_.stop_ids) set(id);
}

bool Matcher::can_end() const {
  if (terminated_) return true;
  const FlatGrammar& g = grammar_->flat();
  for (const uint32_t entry : entries_) {
    uint32_t q = entry & kIdMask;
    while (q != kComplete && q != kNoNode && g.nullable[pool_[q].pos]) q = pool_[q].parent;
    if (q == kComplete || q == kNoNode) return true;
  }
  return false;
}

bool Matcher::is_completed() const {
  if (terminated_) return true;
  for (const uint32_t entry : entries_)
    if ((entry & kIdMask) != kComplete) return false;
  return true;
}

size_t Matcher::min_remaining_bytes() const { return terminated_ ? 0 : fewest_bytes_to_end(entries_); }

size_t Matcher::fewest_bytes_to_end(std::span<const uint32_t> entries) const {
  const FlatGrammar& g = grammar_->flat();
  size_t best = SIZE_MAX;
  for (const uint32_t entry : entries) {
    size_t sum = 0;
    for (uint32_t q = entry & kIdMask; q != kComplete && q != kNoNode; q = pool_[q].parent) sum += g.min_bytes[pool_[q].pos];
    best = std::min(best, sum);
  }
  return best;
}

std::optional<Matcher::Lookahead> Matcher::look_ahead(uint32_t token_id) {
  if (terminated_ || token_id >= grammar_->vocab().size()) return std::nullopt;
  const size_t pool_before = pool_.size();
  std::optional<Lookahead> left;
  if (advance_token(token_id, scratch_ids_)) left = Lookahead{false, fewest_bytes_to_end(scratch_ids_)};
  pool_.resize(pool_before);
  if (!left && is_stop(token_id) && can_end()) left = Lookahead{true, 0};
  return left;
}

bool Matcher::is_stop(uint32_t token_id) const {
  return std::find(options_.stop_ids.begin(), options_.stop_ids.end(), token_id) != options_.stop_ids.end();
}

bool Matcher::advance_token(uint32_t token_id, std::vector<uint32_t>& out) {
  if (!grammar_->vocab().is_special(token_id)) {
    const std::string_view bytes = grammar_->vocab().bytes(token_id);
    return !bytes.empty() && advance_bytes(bytes, out);
  }
  const uint32_t t = stepper_.special_terminal(token_id);
  if (t == UINT32_MAX) return false;
  buf_.assign(entries_.begin(), entries_.end());
  stepper_.advance(buf_, 0, buf_.size(), t, pool_);
  if (buf_.size() == entries_.size()) return false;
  out.assign(buf_.begin() + static_cast<ptrdiff_t>(entries_.size()), buf_.end());
  return true;
}

bool Matcher::advance_bytes(std::string_view bytes, std::vector<uint32_t>& out) {
  buf_.assign(entries_.begin(), entries_.end());
  size_t begin = 0, end = buf_.size();
  for (unsigned char b : bytes) {
    stepper_.advance(buf_, begin, end, b, pool_);
    if (buf_.size() == end) return false;
    begin = end;
    end = buf_.size();
  }
  out.assign(buf_.begin() + static_cast<ptrdiff_t>(begin), buf_.begin() + static_cast<ptrdiff_t>(end));
  for (uint32_t& e : out) e &= kIdMask;
  return true;
}

bool Matcher::accept(uint32_t token_id) {
  if (terminated_ || token_id >= grammar_->vocab().size()) return false;
  const size_t pool_before = pool_.size();
  std::vector<uint32_t> next;
  if (advance_token(token_id, next)) {
    commit(std::move(next), false, pool_before);
    return true;
  }
  pool_.resize(pool_before);
  if (is_stop(token_id) && can_end()) {
    commit(entries_, true, pool_before);
    return true;
  }
  return false;
}

bool Matcher::accept_text(std::string_view bytes) {
  if (terminated_) return false;
  const size_t pool_before = pool_.size();
  std::vector<uint32_t> next;
  if (!advance_bytes(bytes, next)) {
    pool_.resize(pool_before);
    return false;
  }
  commit(std::move(next), false, pool_before);
  return true;
}

void Matcher::commit(std::vector<uint32_t> entries, bool terminated, size_t pool_before) {
  history_.push_back({std::move(entries_), pool_before, terminated_});
  entries_ = std::move(entries);
  terminated_ = terminated;
  if (history_.size() > options_.max_rollback) history_.pop_front();
  if (pool_.size() > 2 * live_after_compact_ + 4096) compact();
}

void Matcher::rollback(size_t n) {
  if (n > history_.size())
    throw Error("grammar matcher: cannot roll back " + std::to_string(n) + " tokens, " +
                std::to_string(history_.size()) + " kept");
  for (; n > 0; --n) {
    Saved& s = history_.back();
    entries_ = std::move(s.entries);
    terminated_ = s.terminated;
    pool_.resize(s.pool_size);
    history_.pop_back();
  }
}

// Drops the nodes no kept state reaches, renumbering the rest (their order is kept, so a parent
// stays below its children and rollback's truncation stays valid).
void Matcher::compact() {
  const size_t base = grammar_->flat().num_rules();
  std::vector<uint8_t> live(pool_.size(), 0);
  auto mark = [&](const std::vector<uint32_t>& entries) {
    for (uint32_t e : entries)
      for (uint32_t q = e & kIdMask; q != kComplete && q != kNoNode && !live[q]; q = pool_[q].parent) live[q] = 1;
  };
  mark(entries_);
  for (const Saved& s : history_) mark(s.entries);
  std::vector<uint32_t> remap(pool_.size(), kNoNode);
  std::vector<Node> kept(pool_.begin(), pool_.begin() + static_cast<ptrdiff_t>(base));
  for (uint32_t i = 0; i < base; ++i) remap[i] = i;
  for (size_t i = base; i < pool_.size(); ++i) {
    if (!live[i]) continue;
    remap[i] = static_cast<uint32_t>(kept.size());
    const uint32_t parent = pool_[i].parent;
    kept.push_back({pool_[i].pos, parent == kNoNode ? kNoNode : remap[parent]});
  }
  auto fix = [&](std::vector<uint32_t>& entries) {
    for (uint32_t& e : entries)
      if ((e & kIdMask) != kComplete) e = remap[e & kIdMask] | (e & kFlag);
  };
  fix(entries_);
  // A saved pool size becomes the number of kept nodes below it.
  std::vector<uint32_t> kept_below(pool_.size() + 1, 0);
  for (size_t i = 0; i < pool_.size(); ++i) kept_below[i + 1] = kept_below[i] + (i < base || live[i] ? 1 : 0);
  for (Saved& s : history_) {
    fix(s.entries);
    s.pool_size = kept_below[std::min(s.pool_size, pool_.size())];
  }
  pool_ = std::move(kept);
  live_after_compact_ = pool_.size();
}

}  // namespace k3::grammar
