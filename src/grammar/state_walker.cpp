#include "grammar/state_walker.h"

#include <algorithm>

namespace k3::grammar {
namespace {

constexpr size_t kMaxStates = 1 << 15;  // then the tables start over (memory bound)

uint64_t hash_entries(const std::vector<uint32_t>& v) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
  for (uint32_t x : v) h = (h ^ x) * 0x100000001B3ull + (h >> 29);
  return h;
}

}  // namespace

StateWalker::StateWalker(const FlatGrammar& g, std::vector<uint32_t> special_ids)
    : g_(&g), stepper_(g, std::move(special_ids)) {
  reset();
}

void StateWalker::reset() {
  pool_ = make_pool(*g_);
  cons_.clear();
  entries_.clear();
  state_begin_.assign(1, 0);
  sure_.clear();
  trans_.clear();
  by_hash_.clear();
  stepper_.set_consing(&cons_);
}

int32_t StateWalker::intern(std::vector<uint32_t>& v) {
  if (v.empty()) return kDead;
  // Canonical: sorted by node id, one entry per id, unflagged when any way in was unflagged.
  std::sort(v.begin(), v.end(), [](uint32_t a, uint32_t b) { return (a & kIdMask) != (b & kIdMask) ? (a & kIdMask) < (b & kIdMask) : a < b; });
  size_t w = 0;
  for (size_t r = 0; r < v.size(); ++r)
    if (w == 0 || (v[w - 1] & kIdMask) != (v[r] & kIdMask)) v[w++] = v[r];
  v.resize(w);
  const uint64_t h = hash_entries(v);
  std::vector<int32_t>& bucket = by_hash_[h];
  for (int32_t s : bucket) {
    const uint32_t b = state_begin_[static_cast<size_t>(s)], e = state_begin_[static_cast<size_t>(s) + 1];
    if (e - b == v.size() && std::equal(v.begin(), v.end(), entries_.begin() + b)) return s;
  }
  const int32_t s = static_cast<int32_t>(sure_.size());
  bool sure = false;
  for (uint32_t x : v) sure |= !(x & kFlag);
  entries_.insert(entries_.end(), v.begin(), v.end());
  state_begin_.push_back(static_cast<uint32_t>(entries_.size()));
  sure_.push_back(sure);
  trans_.resize(trans_.size() + 256, kUnknown);
  bucket.push_back(s);
  return s;
}

int32_t StateWalker::next(int32_t state, uint8_t byte) {
  int32_t& t = trans_[static_cast<size_t>(state) * 256 + byte];
  if (t != kUnknown) return t;
  scratch_.assign(entries_.begin() + state_begin_[static_cast<size_t>(state)],
                  entries_.begin() + state_begin_[static_cast<size_t>(state) + 1]);
  const size_t n = scratch_.size();
  stepper_.advance(scratch_, 0, n, byte, pool_);
  std::vector<uint32_t> out(scratch_.begin() + static_cast<ptrdiff_t>(n), scratch_.end());
  const int32_t r = intern(out);
  trans_[static_cast<size_t>(state) * 256 + byte] = r;  // intern may have grown trans_
  return r;
}

void StateWalker::classify(const TokenTrie& trie, uint32_t pos, std::vector<uint32_t>& accepted,
                           std::vector<uint32_t>& uncertain) {
  if (sure_.size() > kMaxStates) reset();
  std::vector<uint32_t> start{static_cast<uint32_t>(pool_.size())};
  pool_.push_back({pos, g_->context_rule[g_->rule_of[pos]]});  // [pos | CTX(rule of pos)]
  level_.assign(size_t{trie.max_depth} + 1, kDead);
  level_[0] = intern(start);
  const size_t n = trie.size();
  for (size_t i = 0; i < n;) {
    const uint32_t d = trie.depth[i];
    const int32_t s = next(level_[d - 1], trie.byte[i]);
    if (s == kDead) {
      i = trie.end[i];
      continue;
    }
    level_[d] = s;
    if (trie.tok_begin[i] != trie.tok_begin[i + 1]) {
      std::vector<uint32_t>& dst = sure_[static_cast<size_t>(s)] ? accepted : uncertain;
      for (uint32_t k = trie.tok_begin[i]; k < trie.tok_begin[i + 1]; ++k) dst.push_back(trie.ids[k]);
    }
    ++i;
  }
}

}  // namespace k3::grammar
