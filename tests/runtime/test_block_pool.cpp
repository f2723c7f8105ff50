// The serving caches' block pool: allocation order, all-or-nothing multi-block allocation, reference
// counts shared by several owners, and misuse refused with an error instead of corrupting the pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "core/error.h"
#include "error_of.h"
#include "runtime/block_pool.h"

namespace k3 {
namespace {

TEST(BlockPool, FreshPoolHandsOutAscendingIdsUntilEmpty) {
  BlockPool pool(3);
  EXPECT_EQ(pool.free_count(), 3);
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_EQ(pool.allocate(), std::nullopt);
  EXPECT_EQ(pool.used_count(), 3);
  EXPECT_EQ(pool.refcount(1), 1);
}

TEST(BlockPool, MultiBlockAllocationIsAllOrNothing) {
  BlockPool pool(4);
  std::vector<int32_t> table;
  EXPECT_TRUE(pool.allocate(3, table));
  EXPECT_EQ(table, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(pool.allocate(2, table));
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(pool.free_count(), 1);
  EXPECT_TRUE(pool.allocate(0, table));
  EXPECT_FALSE(pool.allocate(-1, table));
}

TEST(BlockPool, SharedBlockIsFreedByItsLastOwner) {
  BlockPool pool(2);
  const int32_t b = *pool.allocate();
  pool.retain(b);  // e.g. the prefix cache keeps it
  EXPECT_EQ(pool.refcount(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.refcount(b), 1);
  EXPECT_EQ(pool.free_count(), 1);
  pool.release(b);
  EXPECT_EQ(pool.refcount(b), 0);
  EXPECT_EQ(pool.free_count(), 2);
  EXPECT_EQ(pool.allocate(), b);  // the most recently freed first
}

TEST(BlockPool, MisuseIsAnErrorAndLeavesThePoolIntact) {
  BlockPool pool(2);
  const int32_t b = *pool.allocate();
  EXPECT_NE(test::error_of([&] { pool.release(1); }).find("block 1 is free"), std::string::npos);
  EXPECT_NE(test::error_of([&] { pool.retain(7); }).find("not in a pool of 2"), std::string::npos);
  EXPECT_NE(test::error_of([&] { pool.release(-1); }).find("not in a pool of 2"), std::string::npos);
  EXPECT_NE(test::error_of([&] { (void)pool.refcount(2); }).find("not in a pool of 2"), std::string::npos);
  EXPECT_NE(test::error_of([] { BlockPool bad(-1); }).find("out of range"), std::string::npos);
  EXPECT_EQ(pool.refcount(b), 1);
  EXPECT_EQ(pool.free_count(), 1);
}

TEST(BlockPool, RandomOwnersNeverShareAFreeBlockAndCountsReturnToZero) {
  std::mt19937_64 gen(7);
  BlockPool pool(64);
  std::vector<std::vector<int32_t>> owners(16);
  for (int step = 0; step < 5000; ++step) {
    auto& o = owners[std::uniform_int_distribution<size_t>(0, owners.size() - 1)(gen)];
    switch (std::uniform_int_distribution<int>(0, 3)(gen)) {
      case 0:
        pool.allocate(std::uniform_int_distribution<int64_t>(1, 6)(gen), o);
        break;
      case 1: {  // share a block another owner holds
        const auto& other = owners[std::uniform_int_distribution<size_t>(0, owners.size() - 1)(gen)];
        if (!other.empty()) {
          const int32_t b = other[std::uniform_int_distribution<size_t>(0, other.size() - 1)(gen)];
          pool.retain(b);
          o.push_back(b);
        }
        break;
      }
      default:
        if (!o.empty()) {
          pool.release(o.back());
          o.pop_back();
        }
    }
    // Every held block's count equals the number of owner entries naming it.
    std::vector<int32_t> expected(64, 0);
    for (const auto& own : owners) {
      for (int32_t b : own) ++expected[static_cast<size_t>(b)];
    }
    int64_t used = 0;
    for (int32_t b = 0; b < 64; ++b) {
      ASSERT_EQ(pool.refcount(b), expected[static_cast<size_t>(b)]) << "step " << step << " block " << b;
      used += expected[static_cast<size_t>(b)] > 0;
    }
    ASSERT_EQ(pool.used_count(), used);
  }
  for (auto& o : owners) pool.release_all(o);
  EXPECT_EQ(pool.free_count(), 64);
}

TEST(BlockPool, BlocksForRoundsUp) {
  EXPECT_EQ(blocks_for(0, 64), 0);
  EXPECT_EQ(blocks_for(1, 64), 1);
  EXPECT_EQ(blocks_for(64, 64), 1);
  EXPECT_EQ(blocks_for(65, 64), 2);
}

}  // namespace
}  // namespace k3
