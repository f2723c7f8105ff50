// Byte-level BPE with tiktoken's rank-merge rule: the rank of a token is its merge priority.
// A piece that is itself a token is emitted whole; otherwise adjacent parts whose concatenation
// has a rank are merged, lowest rank first, ties to the leftmost pair, until no pair has a rank.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

inline constexpr uint32_t kNoRank = UINT32_MAX;

// Byte string → rank, open addressing over one byte arena (no per-token allocation).
class RankTable {
 public:
  RankTable() = default;
  // tokens[r] = bytes of rank r; the caller guarantees uniqueness.
  explicit RankTable(const std::vector<std::string>& tokens);

  uint32_t find(std::string_view bytes) const;
  std::string_view bytes(uint32_t rank) const {
    return {arena_.data() + offsets_[rank], offsets_[rank + 1] - offsets_[rank]};
  }
  uint32_t size() const { return static_cast<uint32_t>(offsets_.empty() ? 0 : offsets_.size() - 1); }

 private:
  struct Slot {  // one cache line fetch per probe: hash, rank and where the bytes are
    uint32_t hash;
    uint32_t rank;  // kNoRank = empty
    uint32_t offset;
    uint32_t length;
  };
  std::string arena_;              // all token bytes by rank
  std::vector<uint32_t> offsets_;  // rank r occupies [offsets_[r], offsets_[r+1])
  std::vector<Slot> slots_;
  uint32_t mask_ = 0;
};

// Rank BPE over a rank table. Every part during merging is a token, so "the rank of the bytes of two
// adjacent parts joined" is looked up as a pair of ranks: a flat table (rank a, rank b) → rank of
// bytes(a)+bytes(b), filled at construction from every split of every token. Same result as
// looking up the joined bytes, without touching any byte string.
class Bpe {
 public:
  static constexpr uint32_t kMaxVocab = (1u << 21) - 1;  // three 21-bit ranks per pair slot

  Bpe() = default;
  // tokens[r] = bytes of rank r: unique, all 256 single bytes present, fewer than kMaxVocab.
  explicit Bpe(const std::vector<std::string>& tokens);

  // Appends the ranks of one pre-token's bytes to out.
  void encode(std::string_view piece, std::vector<uint32_t>& out) const;

  const RankTable& ranks() const { return ranks_; }

 private:
  uint32_t pair_rank(uint32_t a, uint32_t b) const;
  void merge_short(std::string_view piece, std::vector<uint32_t>& out) const;
  void merge_long(std::string_view piece, std::vector<uint32_t>& out) const;

  RankTable ranks_;
  uint32_t byte_rank_[256] = {};
  std::vector<uint32_t> byte_pairs_;  // [b0 * 256 + b1] = rank of the two bytes, kNoRank if none
  std::vector<uint64_t> pairs_;  // slot = a | b << 21 | rank << 42; 0 = empty (key biased by +1)
  uint64_t pair_mask_ = 0;
};

}  // namespace k3
