// The MLA decode's range layouts (src/backend/cuda/attention/mla/mla_decode_ranges.h), the closed
// forms the GPU's schedule kernel evaluates, checked on the CPU (no GPU needed: these run wherever the
// CUDA suite is built, CI included): for random batches (empty, short and long sequences), every
// schedule and range count, the walk the decode kernel makes over its range covers every tile once,
// the partial slots are unique and are exactly the ones the combine reads, and the adaptive choice
// takes the layout the H100 measured faster.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/attention/mla/mla_decode_ranges.h"

namespace k3::cuda::mla_ranges {
namespace {

struct Laid {
  std::vector<int32_t> seq_begin, cta_begin, cta_seq, first, last;
  Layout layout;
};

// The fewest tiles of a sequence that has any (the schedule kernel's min_tiles).
int shortest_with_tiles(const std::vector<int>& tiles) {
  int m = INT_MAX;
  for (int t : tiles) m = t > 0 ? std::min(m, t) : m;
  return m;
}

// What the schedule kernel writes, element by element.
Laid lay_out(const std::vector<int>& tiles, bool balanced, bool adaptive, int balanced_ranges, int splits, int ctas) {
  Laid d;
  const int batch = static_cast<int>(tiles.size());
  d.seq_begin.assign(static_cast<size_t>(batch) + 1, 0);
  for (int b = 0; b < batch; ++b) d.seq_begin[static_cast<size_t>(b) + 1] = d.seq_begin[static_cast<size_t>(b)] + tiles[static_cast<size_t>(b)];
  const int total = d.seq_begin.back(), longest = tiles.empty() ? 0 : *std::max_element(tiles.begin(), tiles.end());
  d.layout = make_layout(balanced, adaptive, batch, total, longest, shortest_with_tiles(tiles), balanced_ranges, splits);
  d.cta_begin.resize(static_cast<size_t>(ctas) + 1);
  for (int c = 0; c <= ctas; ++c) d.cta_begin[static_cast<size_t>(c)] = d.layout.begin(d.seq_begin.data(), batch, c);
  d.cta_seq.assign(static_cast<size_t>(ctas), -1);
  d.first.assign(static_cast<size_t>(batch), 0);
  d.last.assign(static_cast<size_t>(batch), 0);
  for (int b = 0; b < batch; ++b) {
    if (tiles[static_cast<size_t>(b)] > 0) {
      d.first[static_cast<size_t>(b)] = d.layout.first(d.seq_begin.data(), b);
      d.last[static_cast<size_t>(b)] = d.layout.last(d.seq_begin.data(), b);
    }
    int lo = 0, hi = -1;
    d.layout.ranges_of(d.seq_begin.data(), batch, b, lo, hi);
    for (int c = lo; c <= hi; ++c) {
      EXPECT_TRUE(c >= 0 && c < ctas) << "range " << c << " of sequence " << b << " outside the grid of " << ctas;
      if (c >= 0 && c < ctas) d.cta_seq[static_cast<size_t>(c)] = b;
    }
  }
  return d;
}

// The decode kernel's walk over every range (mla_decode_wgmma.cu) and the combine's reads
// (mla_decode.cu), checked against each other.
void check(const std::vector<int>& tiles, bool balanced, bool adaptive, int balanced_ranges, int splits,
           const std::string& what) {
  SCOPED_TRACE(what);
  const int batch = static_cast<int>(tiles.size());
  const int ctas = balanced ? balanced_ranges : adaptive ? std::max(balanced_ranges, batch * splits) : batch * splits;
  const Laid d = lay_out(tiles, balanced, adaptive, balanced_ranges, splits, ctas);
  const int total = d.seq_begin.back();
  ASSERT_EQ(d.cta_begin.front(), 0);
  ASSERT_EQ(d.cta_begin.back(), total);
  for (int c = 0; c < ctas; ++c) ASSERT_LE(d.cta_begin[static_cast<size_t>(c)], d.cta_begin[static_cast<size_t>(c) + 1]) << c;

  std::vector<int> covered(static_cast<size_t>(total), 0);
  std::set<int64_t> slots;
  std::vector<std::vector<int64_t>> partial_slots(static_cast<size_t>(batch));
  std::vector<int> wholes(static_cast<size_t>(batch), 0);
  for (int c = 0; c < ctas; ++c) {
    const int r_begin = d.cta_begin[static_cast<size_t>(c)], r_end = d.cta_begin[static_cast<size_t>(c) + 1];
    if (r_begin >= r_end) continue;
    int b = d.cta_seq[static_cast<size_t>(c)];
    ASSERT_GE(b, 0) << "range " << c << " has no sequence";
    ASSERT_TRUE(d.seq_begin[static_cast<size_t>(b)] <= r_begin && r_begin < d.seq_begin[static_cast<size_t>(b) + 1]) << c;
    if (!d.layout.balanced) {
      ASSERT_LE(r_end, d.seq_begin[static_cast<size_t>(b) + 1]) << "a per-sequence range crosses";
    }
    for (int tile = r_begin; tile < r_end; ++b) {
      if (tile >= d.seq_begin[static_cast<size_t>(b) + 1]) continue;
      const int seq0 = d.seq_begin[static_cast<size_t>(b)], seg_end = std::min(r_end, d.seq_begin[static_cast<size_t>(b) + 1]);
      const bool whole = tile == seq0 && seg_end == d.seq_begin[static_cast<size_t>(b) + 1];
      if (whole) {
        ++wholes[static_cast<size_t>(b)];
      } else {
        const int64_t slot = static_cast<int64_t>(c) + b;
        ASSERT_TRUE(slots.insert(slot).second) << "slot " << slot << " twice";
        ASSERT_LT(slot, static_cast<int64_t>(ctas) + batch);
        partial_slots[static_cast<size_t>(b)].push_back(slot);
      }
      for (; tile < seg_end; ++tile) ++covered[static_cast<size_t>(tile)];
    }
  }
  for (int x = 0; x < total; ++x) ASSERT_EQ(covered[static_cast<size_t>(x)], 1) << "tile " << x;
  for (int b = 0; b < batch; ++b) {
    if (tiles[static_cast<size_t>(b)] == 0) continue;
    const int first = d.first[static_cast<size_t>(b)], last = d.last[static_cast<size_t>(b)];
    ASSERT_LE(first, last) << b;
    if (first == last) {
      EXPECT_EQ(wholes[static_cast<size_t>(b)], 1) << "sequence " << b << " in one range is written whole";
      EXPECT_TRUE(partial_slots[static_cast<size_t>(b)].empty()) << b;
    } else {
      std::vector<int64_t> want;  // the combine's slots first + b … last + b
      for (int c = first; c <= last; ++c) want.push_back(static_cast<int64_t>(c) + b);
      EXPECT_EQ(partial_slots[static_cast<size_t>(b)], want) << "sequence " << b;
      EXPECT_EQ(wholes[static_cast<size_t>(b)], 0) << b;
    }
  }
  if (d.layout.balanced && total > 0) {  // the used ranges: none empty, lengths within one tile
    int shortest = total, longest = 0;
    for (int c = 0; c < d.layout.used; ++c) {
      const int n = d.cta_begin[static_cast<size_t>(c) + 1] - d.cta_begin[static_cast<size_t>(c)];
      shortest = std::min(shortest, n), longest = std::max(longest, n);
    }
    EXPECT_GE(shortest, 1);
    EXPECT_LE(longest - shortest, 1);
    EXPECT_LE(d.layout.used, std::max(1, (total + kMinTilesPerRange - 1) / kMinTilesPerRange));
  }
}

TEST(MlaDecodeRanges, EveryScheduleCoversEveryTileOnceAndTheCombineReadsItsSegments) {
  std::mt19937 gen(1234);
  const std::vector<int> batches = {1, 2, 5, 64, 300};
  int cases = 0;
  for (int batch : batches) {
    for (int kind = 0; kind < 5; ++kind) {
      std::vector<int> tiles(static_cast<size_t>(batch));
      for (int b = 0; b < batch; ++b) {
        std::uniform_int_distribution<int> small(0, 3), any(0, 600);
        tiles[static_cast<size_t>(b)] = kind == 0   ? small(gen)                    // empty and one-tile sequences
                                        : kind == 1 ? 512                           // uniform
                                        : kind == 2 ? (b == 0 ? 512 : 16)           // one long among short
                                        : kind == 3 ? 512 >> (b % 6)                // halving
                                                    : any(gen);                     // anything
      }
      for (int ranges : {1, 3, 66, 132, 1000}) {
        check(tiles, true, false, ranges, 1, "balanced " + std::to_string(ranges) + ", batch " + std::to_string(batch) +
                                                 ", kind " + std::to_string(kind));
        ++cases;
      }
      for (int splits : {1, 2, 5, 64}) {
        check(tiles, false, false, 66, splits, "per sequence " + std::to_string(splits) + ", batch " +
                                                   std::to_string(batch) + ", kind " + std::to_string(kind));
        check(tiles, false, true, 66, splits, "adaptive, splits " + std::to_string(splits) + ", batch " +
                                                  std::to_string(batch) + ", kind " + std::to_string(kind));
        cases += 2;
      }
    }
  }
  EXPECT_EQ(cases, 325);
}

// The choice the adaptive schedule makes, against the H100 run that measured both layouts (96 heads:
// 66 ranges per wave): even lengths stay per sequence where balancing would only add partials; a long
// sequence among short ones, or lengths that halve, are balanced.
TEST(MlaDecodeRanges, AdaptiveTakesTheLayoutMeasuredFaster) {
  auto balanced = [](const std::vector<int>& tiles, int splits) {
    int total = 0, longest = 0;
    for (int t : tiles) total += t, longest = std::max(longest, t);
    return make_layout(false, true, static_cast<int>(tiles.size()), total, longest, shortest_with_tiles(tiles), 66, splits)
        .balanced;
  };
  EXPECT_FALSE(balanced(std::vector<int>(1, 512), 64));  // B 1, 32k: 50.3 µs per sequence, 53.2 balanced
  EXPECT_FALSE(balanced(std::vector<int>(8, 64), 8));    // B 8, 4k: 44.1 / 52.3 µs
  EXPECT_FALSE(balanced(std::vector<int>(8, 512), 8));   // B 8, 32k: 182.6 / 189.1 µs
  EXPECT_FALSE(balanced(std::vector<int>(64, 64), 1));   // B 64, 4k: 177.4 / 195.2 µs
  EXPECT_TRUE(balanced(std::vector<int>(64, 512), 1));   // B 64, 32k: 1255 / 1239 µs
  std::vector<int> one_long(64, 16), halving(64);
  one_long[0] = 512;
  for (int b = 0; b < 64; ++b) halving[static_cast<size_t>(b)] = 512 >> (b % 6);
  EXPECT_TRUE(balanced(one_long, 1));  // 1267 / 106 µs
  EXPECT_TRUE(balanced(halving, 1));   // 1248 / 447 µs
}

}  // namespace
}  // namespace k3::cuda::mla_ranges
