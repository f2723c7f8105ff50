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
  struct Slot {
    uint32_t hash;
    uint32_t rank;  // kNoRank = empty
  };
  std::string arena_;              // all token bytes by rank
  std::vector<uint32_t> offsets_;  // rank r occupies [offsets_[r], offsets_[r+1])
  std::vector<Slot> slots_;
  uint32_t mask_ = 0;
};

// Appends the ranks of one pre-token's bytes to out. Every single byte must have a rank.
void bpe_encode(const RankTable& ranks, std::string_view piece, std::vector<uint32_t>& out);

}  // namespace k3
