// Fixed-size blocks of the serving caches, by id: the pages of the paged MLA latent cache and the
// KDA state slots. A block is free or held by one or more owners (a sequence's block table, the
// prefix cache); its reference count says how many. The pool only counts: the memory behind a block
// id belongs to the cache that uses the pool (block b is bytes [b·block_bytes, (b+1)·block_bytes)).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace k3 {

class BlockPool {
 public:
  // Blocks 0 … capacity-1, all free. capacity ≥ 0.
  explicit BlockPool(int64_t capacity);

  int64_t capacity() const { return static_cast<int64_t>(refs_.size()); }
  int64_t free_count() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_count() const { return capacity() - free_count(); }

  // A free block with reference count 1, or nothing when every block is held. A fresh pool hands out
  // 0, 1, 2, …; after that the most recently freed block goes first (its memory is the warmest).
  std::optional<int32_t> allocate();
  // n blocks appended to `out`, or none at all (and false) when fewer than n are free.
  bool allocate(int64_t n, std::vector<int32_t>& out);
  // One more owner of a held block.
  void retain(int32_t block);
  // One owner fewer; the block is free again when none is left. Releasing a free block, or an id
  // outside the pool, is a logic error and throws k3::Error.
  void release(int32_t block);
  // Releases every block of `blocks` (a sequence's table) and clears it.
  void release_all(std::vector<int32_t>& blocks);
  int32_t refcount(int32_t block) const;

 private:
  void check(int32_t block, const char* what) const;

  std::vector<int32_t> refs_;  // per block: 0 = free
  std::vector<int32_t> free_;  // free ids, a stack (allocate pops from the back)
};

// Blocks of `block_tokens` tokens that `tokens` tokens occupy.
inline int64_t blocks_for(int64_t tokens, int64_t block_tokens) { return (tokens + block_tokens - 1) / block_tokens; }

}  // namespace k3
