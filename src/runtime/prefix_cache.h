// The exact prefix cache of the server: a radix tree over whole blocks of prompt tokens. A node is
// one block of `block_tokens` tokens that followed its parent's; it holds what replaying that
// prefix would have produced — the MLA cache page of the block and, where one was kept, the KDA
// state snapshot taken at the block's end — as references in their BlockPools. A request whose prompt
// starts with a cached run of blocks takes those references instead of recomputing them; a hybrid
// model can only resume where a KDA snapshot exists (a linear-attention state cannot be rebuilt from
// pages), so its match ends at the deepest block that has one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "runtime/block_pool.h"

namespace k3 {

class PrefixCache {
 public:
  // What the cache keeps for one block: ids in the page and snapshot pools (-1: none).
  struct Block {
    int32_t page = -1;
    int32_t snapshot = -1;
  };
  struct Match {
    int64_t tokens = 0;         // matched prompt tokens, a multiple of block_tokens
    std::vector<Block> blocks;  // one per matched block, each retained for the caller
  };

  // `snapshots` may be null (a model without KDA layers keeps none).
  PrefixCache(int64_t block_tokens, BlockPool* pages, BlockPool* snapshots);
  ~PrefixCache();

  int64_t block_tokens() const { return block_tokens_; }
  int64_t cached_blocks() const { return nodes_; }

  // The longest run of cached whole blocks that starts `tokens` and fits in its first max_tokens
  // (a caller leaves at least one prompt token to compute: max_tokens = tokens.size() - 1). With
  // need_snapshot the run ends at the deepest block holding a snapshot. Every returned page and
  // snapshot is retained for the caller, who releases them with the sequence.
  Match match(std::span<const int64_t> tokens, int64_t max_tokens, bool need_snapshot);

  // Offers a sequence's whole blocks: blocks[i] holds tokens [i·block_tokens, (i+1)·block_tokens).
  // Blocks the tree lacks are added (their page and snapshot retained by the cache); a cached block
  // without a snapshot adopts the offered one. The caller keeps its own references.
  void insert(std::span<const int64_t> tokens, std::span<const Block> blocks);

  // Frees up to `want` cached blocks whose page only the cache holds, least recently used leaves
  // first (a linear scan per block: eviction is rare next to steps). Returns the number freed.
  int64_t evict(int64_t want);

 private:
  struct Node;
  void release(const Block& b);
  void retain(const Block& b);

  int64_t block_tokens_;
  BlockPool* pages_;
  BlockPool* snapshots_;
  std::unique_ptr<Node> root_;
  int64_t nodes_ = 0;
  uint64_t clock_ = 0;  // LRU time: every match or insert that passes a node stamps it
};

}  // namespace k3
