// The prefix cache's tree over token blocks: longest whole-block matches, the snapshot rule of
// hybrid models, the references it takes and gives back, and LRU eviction of blocks only it holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "error_of.h"
#include "runtime/prefix_cache.h"

namespace k3 {
namespace {

constexpr int64_t kBlock = 4;

// A sequence that ran `tokens`: one page per whole block, and a snapshot at the end of the blocks
// listed in `snap_at`; it holds one reference to each until release().
struct Sequence {
  std::vector<int64_t> tokens;
  std::vector<PrefixCache::Block> blocks;
  Sequence(BlockPool& pages, BlockPool& snaps, std::vector<int64_t> t, std::vector<size_t> snap_at) : tokens(std::move(t)) {
    for (size_t i = 0; i < tokens.size() / kBlock; ++i) {
      PrefixCache::Block b{*pages.allocate(), -1};
      if (std::find(snap_at.begin(), snap_at.end(), i) != snap_at.end()) b.snapshot = *snaps.allocate();
      blocks.push_back(b);
    }
  }
  void release(BlockPool& pages, BlockPool& snaps) {
    for (const auto& b : blocks) {
      pages.release(b.page);
      if (b.snapshot >= 0) snaps.release(b.snapshot);
    }
    blocks.clear();
  }
};

std::vector<int64_t> iota_tokens(int64_t n, int64_t first) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

void release_match(const PrefixCache::Match& m, BlockPool& pages, BlockPool& snaps) {
  for (const auto& b : m.blocks) {
    pages.release(b.page);
    if (b.snapshot >= 0) snaps.release(b.snapshot);
  }
}

TEST(PrefixCache, SharedSystemPromptMatchesItsWholeBlocks) {
  BlockPool pages(32), snaps(32);
  PrefixCache cache(kBlock, &pages, nullptr);
  std::vector<int64_t> first = iota_tokens(8, 100);  // 2 blocks of "system prompt"
  const std::vector<int64_t> turn_a = {1, 2, 3, 4, 5};
  std::vector<int64_t> a = first;
  a.insert(a.end(), turn_a.begin(), turn_a.end());  // 13 tokens: 3 whole blocks
  Sequence s(pages, snaps, a, {});
  cache.insert(s.tokens, s.blocks);
  EXPECT_EQ(cache.cached_blocks(), 3);
  EXPECT_EQ(pages.refcount(s.blocks[0].page), 2);  // the sequence and the cache

  std::vector<int64_t> b = first;
  b.insert(b.end(), {9, 9, 9, 9, 9, 9});
  const PrefixCache::Match m = cache.match(b, static_cast<int64_t>(b.size()) - 1, false);
  EXPECT_EQ(m.tokens, 8);
  ASSERT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ(m.blocks[0].page, s.blocks[0].page);
  EXPECT_EQ(m.blocks[1].page, s.blocks[1].page);
  EXPECT_EQ(pages.refcount(s.blocks[1].page), 3);
  release_match(m, pages, snaps);
  s.release(pages, snaps);
}

TEST(PrefixCache, AMatchLeavesTheLastPromptTokenToCompute) {
  BlockPool pages(8), snaps(8);
  PrefixCache cache(kBlock, &pages, nullptr);
  Sequence s(pages, snaps, iota_tokens(8, 0), {});
  cache.insert(s.tokens, s.blocks);
  const PrefixCache::Match m = cache.match(s.tokens, 7, false);  // 8 prompt tokens, 7 may come from the cache
  EXPECT_EQ(m.tokens, 4);
  release_match(m, pages, snaps);
  EXPECT_EQ(cache.match(iota_tokens(8, 1), 7, false).tokens, 0);
  s.release(pages, snaps);
}

TEST(PrefixCache, HybridModelsResumeOnlyAtASnapshot) {
  BlockPool pages(16), snaps(16);
  PrefixCache cache(kBlock, &pages, &snaps);
  Sequence s(pages, snaps, iota_tokens(12, 0), {1});  // snapshot after block 1 only
  cache.insert(s.tokens, s.blocks);
  const std::vector<int64_t> prompt = iota_tokens(16, 0);
  PrefixCache::Match m = cache.match(prompt, 15, true);
  EXPECT_EQ(m.tokens, 8);
  ASSERT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ(m.blocks[0].snapshot, -1);  // only the resume point's snapshot is handed out
  EXPECT_EQ(m.blocks[1].snapshot, s.blocks[1].snapshot);
  EXPECT_EQ(snaps.refcount(s.blocks[1].snapshot), 3);
  release_match(m, pages, snaps);

  // A later sequence that kept a snapshot after block 2 extends the resume point.
  Sequence t(pages, snaps, iota_tokens(12, 0), {2});
  cache.insert(t.tokens, t.blocks);
  m = cache.match(prompt, 15, true);
  EXPECT_EQ(m.tokens, 12);
  EXPECT_EQ(m.blocks.back().snapshot, t.blocks[2].snapshot);
  EXPECT_EQ(m.blocks[2].page, s.blocks[2].page);  // the page the tree already had
  release_match(m, pages, snaps);
  s.release(pages, snaps);
  t.release(pages, snaps);
}

TEST(PrefixCache, EvictionTakesLeastRecentlyUsedLeavesThatOnlyItHolds) {
  BlockPool pages(16), snaps(16);
  PrefixCache cache(kBlock, &pages, nullptr);
  Sequence a(pages, snaps, iota_tokens(8, 0), {}), b(pages, snaps, iota_tokens(8, 100), {});
  cache.insert(a.tokens, a.blocks);
  cache.insert(b.tokens, b.blocks);
  EXPECT_EQ(cache.evict(4), 0);  // both sequences still hold every page
  a.release(pages, snaps);
  b.release(pages, snaps);
  release_match(cache.match(iota_tokens(8, 0), 8, false), pages, snaps);  // a's prefix is now the most recent
  const int64_t free_before = pages.free_count();
  EXPECT_EQ(cache.evict(1), 1);
  EXPECT_EQ(pages.free_count(), free_before + 1);
  const PrefixCache::Match held = cache.match(iota_tokens(8, 100), 8, false);
  EXPECT_EQ(held.tokens, 4);  // b lost its leaf, a kept both
  EXPECT_EQ(cache.evict(100), 2);  // a's leaf, then its parent; b's first block is held by `held`
  EXPECT_EQ(cache.cached_blocks(), 1);
  release_match(held, pages, snaps);
  EXPECT_EQ(cache.evict(100), 1);
  EXPECT_EQ(cache.cached_blocks(), 0);
  EXPECT_EQ(pages.used_count(), 0);
}

TEST(PrefixCache, DestructionGivesBackEveryReference) {
  BlockPool pages(8), snaps(8);
  {
    PrefixCache cache(kBlock, &pages, &snaps);
    Sequence s(pages, snaps, iota_tokens(8, 0), {0, 1});
    cache.insert(s.tokens, s.blocks);
    s.release(pages, snaps);
    EXPECT_EQ(pages.used_count(), 2);
    EXPECT_EQ(snaps.used_count(), 2);
  }
  EXPECT_EQ(pages.used_count(), 0);
  EXPECT_EQ(snaps.used_count(), 0);
}

TEST(PrefixCache, BadArgumentsAreErrors) {
  BlockPool pages(4);
  EXPECT_NE(test::error_of([&] { PrefixCache c(0, &pages, nullptr); }).find("at least 1"), std::string::npos);
  PrefixCache cache(kBlock, &pages, nullptr);
  const std::vector<PrefixCache::Block> two(2, PrefixCache::Block{0, -1});
  EXPECT_NE(test::error_of([&] { cache.insert(iota_tokens(5, 0), two); }).find("only 5 tokens"), std::string::npos);
  const std::vector<PrefixCache::Block> snap(1, PrefixCache::Block{0, 0});
  EXPECT_NE(test::error_of([&] { cache.insert(iota_tokens(4, 0), snap); }).find("snapshot pool"), std::string::npos);
  EXPECT_EQ(cache.cached_blocks(), 0);
}

}  // namespace
}  // namespace k3
