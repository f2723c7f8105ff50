// The range layouts of the MLA decode (mla.h, MlaDecodeSchedule) in closed form, shared by the
// schedule kernel (mla_decode.cu) and the host tests (tests/backend/cuda/test_mla_decode_ranges.cpp).
// Plain integer code: host and device.
//
// The batch's 64-token tiles are numbered end to end: sequence b holds [seq_begin[b], seq_begin[b+1]).
// Range c holds [begin(c), begin(c + 1)). Balanced: the first `used` ranges split all `total` tiles
// into lengths that differ by at most one (used ≤ total, so none is empty), the rest are empty at the
// end. Per sequence: ranges b·splits … b·splits + splits − 1 split sequence b into equal pieces, the
// empty ones after its last tile. Either way the ranges from first(b) to last(b) all hold tiles of b.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define K3_MLA_HD __host__ __device__ __forceinline__
#else
#define K3_MLA_HD inline
#endif

namespace k3::cuda::mla_ranges {

// Balanced ranges stop at this many tiles each: fewer, longer ranges when the batch is short.
inline constexpr int kMinTilesPerRange = 2;

// The cost model of the layouts, in units of one tile's work on one CTA: a range costs its tiles plus
// kRangeStartTiles for each segment (Q load, epilogue), and each partial segment kPartialTiles more
// (its write and the combine's read, spread over the GPU), both measured on an H100 with 96 heads.
// `slots`: the ranges the GPU runs at once (CTAs per head block in one wave).
inline constexpr float kRangeStartTiles = 1.0f, kPartialTiles = 0.08f;

K3_MLA_HD float per_sequence_cost(int batch, int max_tiles, int splits, int slots) {
  const int waves = (batch * splits + slots - 1) / slots, per_range = (max_tiles + splits - 1) / splits;
  return static_cast<float>(waves) * (static_cast<float>(per_range) + kRangeStartTiles) +
         (splits > 1 ? kPartialTiles * static_cast<float>(batch * splits) : 0.0f);
}

// A balanced range of ⌈total / ranges⌉ tiles crosses at most ⌈(tiles − 1) / min_tiles⌉ sequence ends
// (min_tiles: the shortest sequence with tiles), and never more than batch − 1: the longest range's
// segments bound the call.
K3_MLA_HD float balanced_cost(int batch, int total_tiles, int min_tiles, int ranges) {
  const int tiles = (total_tiles + ranges - 1) / ranges, shortest = min_tiles > 0 ? min_tiles : 1;
  const int crossings = tiles > 1 ? (tiles - 2) / shortest + 1 : 0, segments = 1 + (crossings < batch - 1 ? crossings : batch - 1);
  return static_cast<float>(tiles) + kRangeStartTiles * static_cast<float>(segments) +
         kPartialTiles * static_cast<float>(ranges + batch);
}

struct Layout {
  bool balanced = true;
  int total = 0;   // tiles of the batch
  int used = 1;    // balanced: the ranges that hold tiles
  int splits = 1;  // per sequence: ranges per sequence

  // Range c's first tile (c ≤ the grid's range count; past the layout's ranges: total).
  K3_MLA_HD int begin(const int32_t* seq_begin, int batch, int c) const {
    if (balanced) return c < used ? static_cast<int>(static_cast<int64_t>(c) * total / used) : total;
    if (c >= batch * splits) return total;
    const int b = c / splits, k = c % splits, s0 = seq_begin[b], n = seq_begin[b + 1] - s0;
    const int piece = (n + splits - 1) / splits;
    return s0 + (k * piece < n ? k * piece : n);
  }
  // The first and the last range holding tiles of sequence b (b has at least one tile).
  K3_MLA_HD int first(const int32_t* seq_begin, int b) const {
    return balanced ? range_of(seq_begin[b]) : b * splits;
  }
  K3_MLA_HD int last(const int32_t* seq_begin, int b) const {
    if (balanced) return range_of(seq_begin[b + 1] - 1);
    const int n = seq_begin[b + 1] - seq_begin[b], piece = (n + splits - 1) / splits;
    return b * splits + (n + piece - 1) / piece - 1;
  }
  // The ranges [lo, hi] whose first tile lies in sequence b (balanced), or that belong to it (per
  // sequence, empty ones included): range c's sequence is b for each of them.
  K3_MLA_HD void ranges_of(const int32_t* seq_begin, int batch, int b, int& lo, int& hi) const {
    if (!balanced) {
      lo = b * splits, hi = lo + splits - 1;
      return;
    }
    if (seq_begin[b] == seq_begin[b + 1]) {  // no tiles: no range starts in it
      lo = 0, hi = -1;
      return;
    }
    lo = first(seq_begin, b), hi = last(seq_begin, b);
    if (begin(seq_begin, batch, lo) < seq_begin[b]) ++lo;
  }

 private:
  // The balanced range holding tile x < total: the c with c·total/used ≤ x < (c+1)·total/used.
  K3_MLA_HD int range_of(int x) const {
    return static_cast<int>((static_cast<int64_t>(x + 1) * used - 1) / total);
  }
};

// The layout of a call: balanced, per sequence, or (adaptive) whichever the cost model finds faster.
// balanced_ranges: the plan's count, also the ranges one wave runs; max_tiles / min_tiles: the longest
// sequence and the shortest one with tiles.
K3_MLA_HD Layout make_layout(bool balanced, bool adaptive, int batch, int total, int max_tiles, int min_tiles,
                             int balanced_ranges, int splits) {
  Layout l;
  l.total = total;
  l.splits = splits;
  const int by_length = (total + kMinTilesPerRange - 1) / kMinTilesPerRange;
  l.used = balanced_ranges < by_length ? balanced_ranges : by_length;
  if (l.used < 1) l.used = 1;
  l.balanced = balanced || (adaptive && balanced_cost(batch, total, min_tiles, l.used) <
                                            per_sequence_cost(batch, max_tiles, splits, balanced_ranges));
  return l;
}

}  // namespace k3::cuda::mla_ranges
