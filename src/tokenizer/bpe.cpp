#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstring>
#include <queue>

namespace k3 {
namespace {

inline uint64_t load_partial(const char* p, size_t n) {  // n ≤ 8, little-endian
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  return v;
}

inline uint64_t mix(uint64_t a, uint64_t b) {
  const __uint128_t m = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
}

// Fast hash for short keys (most tokens are ≤ 16 bytes).
inline uint32_t hash_bytes(const char* p, size_t n) {
  constexpr uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull;
  uint64_t h = k0 ^ (n * k1);
  while (n > 16) {
    uint64_t a, b;
    std::memcpy(&a, p, 8);
    std::memcpy(&b, p + 8, 8);
    h = mix(a ^ k1, b ^ h);
    p += 16;
    n -= 16;
  }
  const uint64_t a = n > 8 ? load_partial(p, 8) : load_partial(p, n);
  const uint64_t b = n > 8 ? load_partial(p + 8, n - 8) : 0;
  return static_cast<uint32_t>(mix(a ^ k1, b ^ h ^ k0) >> 16);
}

}  // namespace

RankTable::RankTable(const std::vector<std::string>& tokens) {
  size_t total = 0;
  for (const auto& t : tokens) total += t.size();
  arena_.reserve(total);
  offsets_.reserve(tokens.size() + 1);
  for (const auto& t : tokens) {
    offsets_.push_back(static_cast<uint32_t>(arena_.size()));
    arena_ += t;
  }
  offsets_.push_back(static_cast<uint32_t>(arena_.size()));
  size_t cap = 16;
  while (cap < tokens.size() * 2) cap *= 2;
  slots_.assign(cap, Slot{0, kNoRank});
  mask_ = static_cast<uint32_t>(cap - 1);
  for (uint32_t r = 0; r < tokens.size(); ++r) {
    const uint32_t h = hash_bytes(tokens[r].data(), tokens[r].size());
    uint32_t i = h & mask_;
    while (slots_[i].rank != kNoRank) i = (i + 1) & mask_;
    slots_[i] = {h, r};
  }
}

uint32_t RankTable::find(std::string_view key) const {
  if (slots_.empty()) return kNoRank;
  const uint32_t h = hash_bytes(key.data(), key.size());
  for (uint32_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.rank == kNoRank) return kNoRank;
    if (s.hash == h) {
      const uint32_t off = offsets_[s.rank];
      if (offsets_[s.rank + 1] - off == key.size() && std::memcmp(arena_.data() + off, key.data(), key.size()) == 0)
        return s.rank;
    }
  }
}

namespace {

// tiktoken's own scheme: a vector of part starts with the cached rank of the pair beginning at each
// part; each step scans for the minimum. Quadratic, used for short pieces where it is fastest.
void merge_short(const RankTable& ranks, std::string_view piece, std::vector<uint32_t>& out) {
  constexpr size_t kMax = 128;
  uint32_t start[kMax + 1];
  uint32_t pair[kMax + 1];
  const size_t n = piece.size();
  size_t parts = n;  // part i spans [start[i], start[i+1])
  for (size_t i = 0; i <= n; ++i) start[i] = static_cast<uint32_t>(i);
  auto pair_rank = [&](size_t i) {  // rank of parts i and i+1 joined
    return i + 2 <= parts ? ranks.find(piece.substr(start[i], start[i + 2] - start[i])) : kNoRank;
  };
  for (size_t i = 0; i + 1 < parts; ++i) pair[i] = pair_rank(i);
  while (parts > 1) {
    uint32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts; ++i) {
      if (pair[i] < best) {
        best = pair[i];
        at = i;
      }
    }
    if (best == kNoRank) break;
    // Drop the boundary start[at+1].
    std::memmove(&start[at + 1], &start[at + 2], (parts - at - 1) * sizeof(uint32_t));
    std::memmove(&pair[at + 1], &pair[at + 2], (parts >= at + 3 ? parts - at - 3 : 0) * sizeof(uint32_t));
    --parts;
    if (at + 1 < parts) pair[at] = pair_rank(at);
    if (at > 0) pair[at - 1] = pair_rank(at - 1);
  }
  for (size_t i = 0; i < parts; ++i) out.push_back(ranks.find(piece.substr(start[i], start[i + 1] - start[i])));
}

// Same rule in O(n log n): a doubly linked list of parts and a min-heap of (rank, start) pairs with
// lazy deletion. (rank, start) order = lowest rank, then leftmost, as in tiktoken.
void merge_long(const RankTable& ranks, std::string_view piece, std::vector<uint32_t>& out) {
  const uint32_t n = static_cast<uint32_t>(piece.size());
  std::vector<uint32_t> next(n), prev(n), pair(n, kNoRank);  // indexed by part start; next == n at end
  std::vector<bool> alive(n, true);
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i - 1;  // wraps for part 0; never read there
  }
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> heap;
  auto refresh = [&](uint32_t s) {  // recompute the pair starting at part s
    const uint32_t a = next[s];
    if (a >= n) {
      pair[s] = kNoRank;
      return;
    }
    const uint32_t end = next[a];
    pair[s] = ranks.find(piece.substr(s, end - s));
    if (pair[s] != kNoRank) heap.push((static_cast<uint64_t>(pair[s]) << 32) | s);
  };
  for (uint32_t i = 0; i < n; ++i) refresh(i);
  while (!heap.empty()) {
    const uint64_t top = heap.top();
    heap.pop();
    const uint32_t s = static_cast<uint32_t>(top);
    const uint32_t r = static_cast<uint32_t>(top >> 32);
    if (!alive[s] || pair[s] != r) continue;  // stale
    const uint32_t gone = next[s];
    alive[gone] = false;
    next[s] = next[gone];
    if (next[s] < n) prev[next[s]] = s;
    refresh(s);
    if (s > 0) refresh(prev[s]);
  }
  for (uint32_t s = 0; s < n; s = next[s]) out.push_back(ranks.find(piece.substr(s, next[s] - s)));
}

}  // namespace

void bpe_encode(const RankTable& ranks, std::string_view piece, std::vector<uint32_t>& out) {
  if (piece.empty()) return;
  const uint32_t whole = ranks.find(piece);
  if (whole != kNoRank) {
    out.push_back(whole);
  } else if (piece.size() <= 128) {
    merge_short(ranks, piece, out);
  } else {
    merge_long(ranks, piece, out);
  }
}

}  // namespace k3
