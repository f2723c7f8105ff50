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
  slots_.assign(cap, Slot{0, kNoRank, 0, 0});
  mask_ = static_cast<uint32_t>(cap - 1);
  for (uint32_t r = 0; r < tokens.size(); ++r) {
    const uint32_t h = hash_bytes(tokens[r].data(), tokens[r].size());
    uint32_t i = h & mask_;
    while (slots_[i].rank != kNoRank) i = (i + 1) & mask_;
    slots_[i] = {h, r, offsets_[r], offsets_[r + 1] - offsets_[r]};
  }
}

uint32_t RankTable::find(std::string_view key) const {
  if (slots_.empty()) return kNoRank;
  const uint32_t h = hash_bytes(key.data(), key.size());
  for (uint32_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.rank == kNoRank) return kNoRank;
    if (s.hash == h && s.length == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
      return s.rank;
  }
}

namespace {

constexpr uint64_t kRankBits = 21;

inline uint64_t pair_key(uint32_t a, uint32_t b) {  // +1 keeps 0 free as the empty slot
  return (static_cast<uint64_t>(a) + 1) | (static_cast<uint64_t>(b) + 1) << kRankBits;
}

inline uint64_t pair_hash(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 20; }

}  // namespace

Bpe::Bpe(const std::vector<std::string>& tokens) : ranks_(tokens) {
  for (unsigned b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_rank_[b] = ranks_.find(std::string_view(&c, 1));
  }
  byte_pairs_.resize(256 * 256);
  for (unsigned b = 0; b < 256 * 256; ++b) {
    const char two[2] = {static_cast<char>(b >> 8), static_cast<char>(b & 255)};
    byte_pairs_[b] = ranks_.find(std::string_view(two, 2));
  }
  std::vector<uint64_t> entries;  // (key, rank) packed as in the table
  for (uint32_t r = 0; r < tokens.size(); ++r) {
    const std::string_view t = tokens[r];
    for (size_t k = 1; k < t.size(); ++k) {
      const uint32_t a = ranks_.find(t.substr(0, k));
      if (a == kNoRank) continue;
      const uint32_t b = ranks_.find(t.substr(k));
      if (b != kNoRank) entries.push_back(pair_key(a, b) | static_cast<uint64_t>(r) << (2 * kRankBits));
    }
  }
  size_t cap = 16;
  while (cap < entries.size() * 2) cap *= 2;
  pairs_.assign(cap, 0);
  pair_mask_ = cap - 1;
  for (uint64_t e : entries) {
    const uint64_t key = e & ((1ull << (2 * kRankBits)) - 1);
    for (uint64_t i = pair_hash(key) & pair_mask_;; i = (i + 1) & pair_mask_) {
      if (pairs_[i] == 0) {
        pairs_[i] = e;
        break;
      }
    }
  }
}

inline uint32_t Bpe::pair_rank(uint32_t a, uint32_t b) const {
  const uint64_t key = pair_key(a, b);
  for (uint64_t i = pair_hash(key) & pair_mask_;; i = (i + 1) & pair_mask_) {
    const uint64_t slot = pairs_[i];
    if (slot == 0) return kNoRank;
    if ((slot & ((1ull << (2 * kRankBits)) - 1)) == key) return static_cast<uint32_t>(slot >> (2 * kRankBits));
  }
}

// tiktoken's own scheme: parts with the cached rank of the pair beginning at each part; each step
// scans for the minimum (strictly lower wins, so ties go left). Quadratic; fastest for short pieces.
void Bpe::merge_short(std::string_view piece, std::vector<uint32_t>& out) const {
  constexpr size_t kMax = 128;
  uint32_t part[kMax];  // ranks of the current parts
  uint32_t pair[kMax];  // pair[i] = rank of part[i] joined with part[i+1]
  size_t n = piece.size();
  for (size_t i = 0; i < n; ++i) part[i] = byte_rank_[static_cast<unsigned char>(piece[i])];
  for (size_t i = 0; i + 1 < n; ++i)
    pair[i] = byte_pairs_[static_cast<unsigned char>(piece[i]) * 256u + static_cast<unsigned char>(piece[i + 1])];
  while (n > 1) {
    uint32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (pair[i] < best) {
        best = pair[i];
        at = i;
      }
    }
    if (best == kNoRank) break;
    part[at] = best;
    std::memmove(&part[at + 1], &part[at + 2], (n - at - 2) * sizeof(uint32_t));
    if (n >= at + 3) std::memmove(&pair[at + 1], &pair[at + 2], (n - at - 3) * sizeof(uint32_t));
    --n;
    if (at + 1 < n) pair[at] = pair_rank(part[at], part[at + 1]);
    if (at > 0) pair[at - 1] = pair_rank(part[at - 1], part[at]);
  }
  out.insert(out.end(), part, part + n);
}

// Same rule in O(n log n): a doubly linked list of parts and a min-heap of (pair rank, position)
// with lazy deletion; (rank, position) order = lowest rank, then leftmost, as in tiktoken.
void Bpe::merge_long(std::string_view piece, std::vector<uint32_t>& out) const {
  const uint32_t n = static_cast<uint32_t>(piece.size());
  // Parts are identified by their first byte's position; next == n marks the end.
  std::vector<uint32_t> next(n), prev(n), part(n), pair(n, kNoRank);
  std::vector<bool> alive(n, true);
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i - 1;  // wraps for position 0; never read there
    part[i] = byte_rank_[static_cast<unsigned char>(piece[i])];
  }
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> heap;
  auto refresh = [&](uint32_t s) {
    pair[s] = next[s] < n ? pair_rank(part[s], part[next[s]]) : kNoRank;
    if (pair[s] != kNoRank) heap.push(static_cast<uint64_t>(pair[s]) << 32 | s);
  };
  for (uint32_t i = 0; i < n; ++i) refresh(i);
  while (!heap.empty()) {
    const uint64_t top = heap.top();
    heap.pop();
    const uint32_t s = static_cast<uint32_t>(top);
    if (!alive[s] || pair[s] != static_cast<uint32_t>(top >> 32)) continue;  // stale entry
    const uint32_t gone = next[s];
    alive[gone] = false;
    part[s] = pair[s];
    next[s] = next[gone];
    if (next[s] < n) prev[next[s]] = s;
    refresh(s);
    if (s > 0) refresh(prev[s]);
  }
  for (uint32_t s = 0; s < n; s = next[s]) out.push_back(part[s]);
}

void Bpe::encode(std::string_view piece, std::vector<uint32_t>& out) const {
  if (piece.empty()) return;
  const uint32_t whole = ranks_.find(piece);
  if (whole != kNoRank) {
    out.push_back(whole);
  } else if (piece.size() <= 128) {
    merge_short(piece, out);
  } else {
    merge_long(piece, out);
  }
}

}  // namespace k3
