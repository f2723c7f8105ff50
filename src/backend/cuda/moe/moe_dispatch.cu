// MoE dispatch (moe.h): a stable counting sort of the T·k picks by expert in one CTA, the tile maps
// of the grouped GEMM, and the two data movers around it, gather (rows into sorted order) and
// combine (sum back per token, weighted unless the rows carry their weights), and the routing weights
// laid out per sorted row for GEMM 2's epilogue. Nothing depends on the counts on the host.
//
// Dispatch, one CTA of 32 warps; warp w owns the contiguous pick range [w·c, (w+1)·c), c = ⌈R/32⌉:
//   1. per-warp histograms hist[w][e] (warp-private, so no atomics: __match_any_sync groups the
//      lanes that picked the same expert and the lowest of them adds the group's size);
//   2. thread e sums its column, one block scan gives the expert offsets and the tile offsets of
//      each tile height, and hist[w][e] becomes warp w's first sorted position for expert e;
//   3. each warp walks its range again in the same order: a pick's position is its warp's cursor
//      plus its rank among the lower lanes of its group; the group's lowest lane advances the cursor.
// Ranges, steps and lanes all run in (t, j) order, so within an expert the rows are in (t, j) order.
// Picks with a negative id are skipped (expert streaming runs a layer's experts in waves): not
// counted, pick_row −1, and the counted rows end before R.
//   4. the tile maps: tile i of height h finds its expert by binary search over the tile offsets.
#include <algorithm>
#include <string>

#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/moe/moe_tiles.h"

namespace k3::cuda {
namespace {

using detail::bf16;
using detail::kVec;

constexpr int kDispatchThreads = 1024, kDispatchWarps = kDispatchThreads / 32;
constexpr int kMaxExperts = 1024;  // one expert per thread in the scan
constexpr int kBatch = 4;          // 32-pick steps whose ids are loaded together (loads in flight)
__host__ __device__ constexpr int tile_rows(int h) { return h == 0 ? 16 : h == 1 ? 64 : 128; }

size_t round256(size_t n) { return (n + 255) & ~size_t{255}; }

// Byte offsets of the dispatch's arrays in its buffer.
struct Layout {
  size_t offsets = 0, sorted = 0, pick = 0, counts = 0, tiles[kMoeTileHeights] = {}, total = 0;
  int64_t bound[kMoeTileHeights] = {};
};

int64_t tile_bound(int64_t rows, int64_t experts, int height) {
  return std::min(experts, rows) + rows / height;
}

Layout layout(int64_t tokens, int64_t top_k, int64_t experts) {
  const int64_t R = tokens * top_k;
  Layout l;
  size_t p = 0;
  l.offsets = p, p += round256(static_cast<size_t>(experts + 1) * 4);
  l.sorted = p, p += round256(static_cast<size_t>(R) * 4);
  l.pick = p, p += round256(static_cast<size_t>(R) * 4);
  l.counts = p, p += round256(kMoeTileHeights * 4);
  for (int h = 0; h < kMoeTileHeights; ++h) {
    l.bound[h] = tile_bound(R, experts, tile_rows(h));
    l.tiles[h] = p, p += round256(static_cast<size_t>(l.bound[h]) * 16);
  }
  l.total = p;
  return l;
}

struct DispatchArgs {
  const int32_t* ids;
  int64_t ld_ids;
  int top_k, rows, experts;
  int32_t* offsets;
  int32_t* sorted_token;
  int32_t* pick_row;
  int32_t* tile_count;
  int4* tiles[kMoeTileHeights];
};

// Exclusive scan of one int4 per thread over the block; `total` gets the block's sums.
__device__ int4 block_exclusive_scan(int4 v, int4& total, int4* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int4 inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int x = __shfl_up_sync(0xFFFFFFFFu, inc.x, o), y = __shfl_up_sync(0xFFFFFFFFu, inc.y, o);
    const int z = __shfl_up_sync(0xFFFFFFFFu, inc.z, o), w = __shfl_up_sync(0xFFFFFFFFu, inc.w, o);
    if (lane >= o) inc.x += x, inc.y += y, inc.z += z, inc.w += w;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    int4 s = warp_sums[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int x = __shfl_up_sync(0xFFFFFFFFu, s.x, o), y = __shfl_up_sync(0xFFFFFFFFu, s.y, o);
      const int z = __shfl_up_sync(0xFFFFFFFFu, s.z, o), w = __shfl_up_sync(0xFFFFFFFFu, s.w, o);
      if (lane >= o) s.x += x, s.y += y, s.z += z, s.w += w;
    }
    warp_sums[lane] = s;  // inclusive over warps
  }
  __syncthreads();
  const int4 before = warp > 0 ? warp_sums[warp - 1] : make_int4(0, 0, 0, 0);
  total = warp_sums[kDispatchWarps - 1];
  return make_int4(before.x + inc.x - v.x, before.y + inc.y - v.y, before.z + inc.z - v.z, before.w + inc.w - v.w);
}

__global__ void __launch_bounds__(kDispatchThreads) moe_dispatch_kernel(DispatchArgs a) {
  extern __shared__ int32_t smem[];
  __shared__ int4 warp_sums[kDispatchWarps];
  const int E = a.experts, R = a.rows;
  int32_t* hist = smem;                      // [warps][E]: counts, then cursors
  int32_t* off = hist + kDispatchWarps * E;  // [E + 1]: row offsets
  int32_t* toff = off + E + 1;               // [heights][E + 1]: tile offsets
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < kDispatchWarps * E; i += kDispatchThreads) hist[i] = 0;
  __syncthreads();

  const int chunk = (R + kDispatchWarps - 1) / kDispatchWarps;
  const int r_begin = min(R, warp * chunk), r_end = min(R, r_begin + chunk);
  int32_t* my_hist = hist + warp * E;
  auto expert_of = [&](int r) {
    const int t = r / a.top_k;
    return r < r_end ? a.ids[t * a.ld_ids + (r - t * a.top_k)] : -1;  // -1: past the range
  };
  // 1. Histograms.
  for (int base = r_begin; base < r_end; base += 32 * kBatch) {
    int e[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) e[u] = expert_of(base + u * 32 + lane);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const unsigned group = __match_any_sync(0xFFFFFFFFu, e[u]);
      if (e[u] >= 0 && lane == __ffs(group) - 1) my_hist[e[u]] += __popc(group);
      __syncwarp();
    }
  }
  __syncthreads();

  // 2. Offsets: counts and tiles per expert, scanned; per-warp cursors.
  int4 v = make_int4(0, 0, 0, 0);
  if (tid < E) {
    int c = 0;
    for (int w = 0; w < kDispatchWarps; ++w) c += hist[w * E + tid];
    v = make_int4(c, (c + tile_rows(0) - 1) / tile_rows(0), (c + tile_rows(1) - 1) / tile_rows(1),
                  (c + tile_rows(2) - 1) / tile_rows(2));
  }
  int4 total;
  const int4 ex = block_exclusive_scan(v, total, warp_sums);
  if (tid < E) {
    off[tid] = ex.x;
    a.offsets[tid] = ex.x;
    toff[tid] = ex.y, toff[(E + 1) + tid] = ex.z, toff[2 * (E + 1) + tid] = ex.w;
    int cursor = ex.x;
    for (int w = 0; w < kDispatchWarps; ++w) {
      const int c = hist[w * E + tid];
      hist[w * E + tid] = cursor;
      cursor += c;
    }
  }
  // Skipped picks (ids < 0) are not counted: the counted rows end at total.x ≤ R. The sorted rows
  // past them name token 0, so that a gather over all R rows reads valid memory (no tile covers them).
  for (int i = total.x + tid; i < R; i += kDispatchThreads) a.sorted_token[i] = 0;
  if (tid == 0) {
    off[E] = total.x;
    a.offsets[E] = total.x;
    toff[E] = total.y, toff[(E + 1) + E] = total.z, toff[2 * (E + 1) + E] = total.w;
    a.tile_count[0] = total.y, a.tile_count[1] = total.z, a.tile_count[2] = total.w;
  }
  __syncthreads();

  // 3. Placement, in the order of step 1.
  const unsigned lower = (1u << lane) - 1u;
  for (int base = r_begin; base < r_end; base += 32 * kBatch) {
    int e[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) e[u] = expert_of(base + u * 32 + lane);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const unsigned group = __match_any_sync(0xFFFFFFFFu, e[u]);
      if (e[u] >= 0) {
        const int r = base + u * 32 + lane;
        const int pos = my_hist[e[u]] + __popc(group & lower);
        a.sorted_token[pos] = r / a.top_k;
        a.pick_row[r] = pos;
      } else if (base + u * 32 + lane < r_end) {
        a.pick_row[base + u * 32 + lane] = -1;  // a skipped pick
      }
      __syncwarp();
      if (e[u] >= 0 && lane == __ffs(group) - 1) my_hist[e[u]] += __popc(group);
      __syncwarp();
    }
  }

  // 4. Tile maps (off and toff are final since step 2's barrier).
#pragma unroll
  for (int h = 0; h < kMoeTileHeights; ++h) {
    const int32_t* to = toff + h * (E + 1);
    for (int i = tid; i < to[E]; i += kDispatchThreads) {
      int lo = 0, hi = E - 1;  // the last expert whose first tile is <= i owns tile i
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (to[mid] <= i) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      a.tiles[h][i] = make_int4(lo, off[lo] + (i - to[lo]) * tile_rows(h), to[lo], to[lo + 1] - to[lo]);
    }
  }
}

// One warp per sorted row, 8 values per lane and step.
constexpr int kGatherWarps = 8;

template <typename Tx>
__global__ void __launch_bounds__(kGatherWarps * 32)
    moe_gather_kernel(const Tx* __restrict__ x, int64_t ldx, const int32_t* __restrict__ sorted_token,
                      bf16* __restrict__ xs, int64_t ldxs, int rows, int cols) {
  // A GEMM launched next as a programmatic dependent (launch.h) may start streaming its weights now;
  // it waits for this grid's completion before it reads xs.
  asm volatile("griddepcontrol.launch_dependents;");
  const int r = blockIdx.x * kGatherWarps + (threadIdx.x >> 5);
  if (r >= rows) return;
  const Tx* src = x + static_cast<int64_t>(sorted_token[r]) * ldx;
  bf16* dst = xs + static_cast<int64_t>(r) * ldxs;
#pragma unroll 4
  for (int c = (threadIdx.x & 31) * kVec; c < cols; c += 32 * kVec) {
    float v[kVec];
    detail::load8(src + c, v);
    detail::store8(dst + c, v);
  }
}

// Grid (token, column block): each thread owns one 8-column vector of one token; the token's k
// picks (rows and weights) are staged in shared memory first. The picks' loads go out kPicksInFlight
// at a time before their FMAs, which still run in pick order j = 0…k−1 (the result does not depend on
// the batching).
constexpr int kCombineThreads = 128;
constexpr int kMaxTopK = 256;
constexpr int kPicksInFlight = 8;

template <typename Ty, typename To>
__global__ void __launch_bounds__(kCombineThreads)
    moe_combine_kernel(const Ty* __restrict__ ys, int64_t ldy, const int32_t* __restrict__ pick_row,
                       const float* __restrict__ weights, int64_t ldw, To* __restrict__ out, int64_t ldo, int top_k,
                       int cols, bool accumulate) {
  __shared__ int32_t rows[kMaxTopK];
  __shared__ float wts[kMaxTopK];
  const int t = blockIdx.x;
  for (int j = threadIdx.x; j < top_k; j += kCombineThreads) {
    rows[j] = pick_row[static_cast<int64_t>(t) * top_k + j];
    wts[j] = weights != nullptr ? weights[static_cast<int64_t>(t) * ldw + j] : 1.0f;  // null: rows carry them
  }
  __syncthreads();
  const int c = (blockIdx.y * kCombineThreads + threadIdx.x) * kVec;
  if (c >= cols) return;
  To* dst = out + static_cast<int64_t>(t) * ldo + c;
  float old[kVec];
  if (accumulate) detail::load8(dst, old);
  float acc[kVec] = {};
  for (int j0 = 0; j0 < top_k; j0 += kPicksInFlight) {
    float v[kPicksInFlight][kVec];
#pragma unroll
    for (int u = 0; u < kPicksInFlight; ++u) {
      if (j0 + u < top_k && rows[j0 + u] >= 0) detail::load8(ys + static_cast<int64_t>(rows[j0 + u]) * ldy + c, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kPicksInFlight; ++u) {
      if (j0 + u < top_k && rows[j0 + u] >= 0) {  // pick_row −1: a skipped pick adds nothing
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[i] = fmaf(wts[j0 + u], v[u][i], acc[i]);
      }
    }
  }
  if (accumulate) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = old[i] + acc[i];
  }
  detail::store8(dst, acc);
}

// One thread per pick.
constexpr int kRowWeightThreads = 256;
__global__ void __launch_bounds__(kRowWeightThreads)
    moe_row_weights_kernel(const float* __restrict__ weights, int64_t ldw, const int32_t* __restrict__ pick_row, int top_k,
                           int picks, float* __restrict__ row_weight) {
  const int p = blockIdx.x * kRowWeightThreads + threadIdx.x;
  if (p >= picks) return;
  const int r = pick_row[p];
  if (r >= 0) row_weight[r] = weights[static_cast<int64_t>(p / top_k) * ldw + p % top_k];
}

void check_dispatch(const MoeDispatch& d, const char* what) {
  if (d.expert_offsets == nullptr || d.tiles == nullptr) throw Error(std::string(what) + ": dispatch has no buffers");
}

__global__ void moe_map_experts_kernel(const int32_t* ids, int64_t ids_ld, const int32_t* map, int experts, int32_t* out,
                                       int64_t out_ld, int top_k, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int t = i / top_k, j = i % top_k;
  const int32_t e = ids[t * ids_ld + j];
  out[t * out_ld + j] = e >= 0 && e < experts ? map[e] : -1;
}

}  // namespace

void moe_map_experts(const DeviceTensor& ids, const int32_t* map, int64_t experts, const DeviceTensor& out,
                     cudaStream_t stream) {
  expect_dtype(ids, DType::kI32, "moe_map_experts ids");
  expect_dtype(out, DType::kI32, "moe_map_experts out");
  expect_shape(out, ids.rows, ids.cols, "moe_map_experts out");
  if (experts <= 0 || experts > kMaxExperts) throw Error("moe_map_experts: experts must be in [1, 1024], got " + std::to_string(experts));
  const int64_t n = ids.rows * ids.cols;
  if (n == 0) return;
  if (n > INT32_MAX) throw Error("moe_map_experts: too many picks");
  constexpr int kThreads = 256;
  moe_map_experts_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      ids.as<const int32_t>(), ids.ld, map, static_cast<int>(experts), out.as<int32_t>(), out.ld, static_cast<int>(ids.cols),
      static_cast<int>(n));
  K3_CUDA_CHECK_LAUNCH("moe_map_experts_kernel");
}

namespace {

constexpr int kOneExpertThreads = 256;
__global__ void __launch_bounds__(kOneExpertThreads) moe_one_expert_dispatch_kernel(DispatchArgs a) {
  const int R = a.rows;
  const int i = blockIdx.x * kOneExpertThreads + threadIdx.x;
  if (i < R) a.sorted_token[i] = i, a.pick_row[i] = i;
#pragma unroll
  for (int h = 0; h < kMoeTileHeights; ++h) {
    const int n = (R + tile_rows(h) - 1) / tile_rows(h);
    if (i < n) a.tiles[h][i] = make_int4(0, i * tile_rows(h), 0, n);
    if (i == 0) a.tile_count[h] = n;
  }
  if (i == 0) a.offsets[0] = 0, a.offsets[1] = R;
}

}  // namespace

int moe_tile_rows(MoeTile tile) {
  switch (tile) {
    case MoeTile::kM16: return tile_rows(0);
    case MoeTile::kM64: return tile_rows(1);
    case MoeTile::kM128: return tile_rows(2);
    case MoeTile::kAuto: break;
  }
  throw Error("moe_tile_rows: kAuto has no height (resolve it with moe_tile_for)");
}

// H200, Kimi-Linear / Kimi-K3 shapes: kM16 is best up to ~9 rows per expert (weight-bandwidth
// bound either way), kM64 at 16, kM128 at 73 and 128; the switch at 40 lies between measured points.
MoeTile moe_tile_for(int64_t rows, int64_t experts) {
  const double per_expert = static_cast<double>(rows) / static_cast<double>(std::max<int64_t>(1, experts));
  if (per_expert <= 12) return MoeTile::kM16;
  return per_expert <= 40 ? MoeTile::kM64 : MoeTile::kM128;
}

MoeTileMap moe_tile_map(const MoeDispatch& d, MoeTile tile) {
  check_dispatch(d, "moe_tile_map");
  if (tile == MoeTile::kAuto) tile = moe_tile_for(d.rows(), moe_choice_experts(d));
  const int h = static_cast<int>(tile) - static_cast<int>(MoeTile::kM16);
  const Layout l = layout(d.tokens, d.top_k, d.experts);
  const char* base = static_cast<const char*>(d.tiles) - l.counts;
  return {reinterpret_cast<const int32_t*>(base + l.counts) + h, reinterpret_cast<const int32_t*>(base + l.tiles[h]),
          l.bound[h]};
}

size_t moe_dispatch_bytes(int64_t tokens, int64_t top_k, int64_t experts) {
  return layout(tokens, top_k, experts).total;
}

MoeDispatch moe_dispatch_view(void* buffer, int64_t tokens, int64_t top_k, int64_t experts) {
  if (tokens < 0 || top_k <= 0 || experts <= 0 || tokens * top_k > INT32_MAX / 2) {
    throw Error("moe_dispatch_view: bad shape T " + std::to_string(tokens) + ", k " + std::to_string(top_k) + ", E " +
                std::to_string(experts));
  }
  if (reinterpret_cast<uintptr_t>(buffer) % 256 != 0) throw Error("moe_dispatch_view: buffer not 256-byte aligned");
  const Layout l = layout(tokens, top_k, experts);
  char* b = static_cast<char*>(buffer);
  MoeDispatch d;
  d.tokens = tokens, d.top_k = top_k, d.experts = experts, d.choice_experts = experts;
  d.expert_offsets = reinterpret_cast<int32_t*>(b + l.offsets);
  d.sorted_token = reinterpret_cast<int32_t*>(b + l.sorted);
  d.pick_row = reinterpret_cast<int32_t*>(b + l.pick);
  d.tiles = b + l.counts;  // the tile maps follow their counts
  return d;
}

void moe_dispatch(const DeviceTensor& ids, const MoeDispatch& d, cudaStream_t stream) {
  check_dispatch(d, "moe_dispatch");
  expect_dtype(ids, DType::kI32, "moe_dispatch ids");
  expect_shape(ids, d.tokens, d.top_k, "moe_dispatch ids");
  if (d.experts > kMaxExperts) throw Error("moe_dispatch: at most 1024 experts, got " + std::to_string(d.experts));
  const Layout l = layout(d.tokens, d.top_k, d.experts);
  char* base = static_cast<char*>(d.tiles) - l.counts;
  DispatchArgs a{ids.as<const int32_t>(), ids.ld, static_cast<int>(d.top_k), static_cast<int>(d.rows()),
                 static_cast<int>(d.experts), d.expert_offsets, d.sorted_token, d.pick_row,
                 reinterpret_cast<int32_t*>(base + l.counts), {}};
  for (int h = 0; h < kMoeTileHeights; ++h) a.tiles[h] = reinterpret_cast<int4*>(base + l.tiles[h]);
  const int smem = static_cast<int>((kDispatchWarps * d.experts + (1 + kMoeTileHeights) * (d.experts + 1)) * 4);
  allow_dynamic_smem(moe_dispatch_kernel, smem);
  moe_dispatch_kernel<<<1, kDispatchThreads, smem, stream>>>(a);
  K3_CUDA_CHECK_LAUNCH("moe_dispatch_kernel");
}

void moe_one_expert_dispatch(const MoeDispatch& d, cudaStream_t stream) {
  check_dispatch(d, "moe_one_expert_dispatch");
  if (d.experts != 1 || d.top_k != 1) {
    throw Error("moe_one_expert_dispatch: needs E = 1 and top-k 1, got E " + std::to_string(d.experts) + ", k " +
                std::to_string(d.top_k));
  }
  const Layout l = layout(d.tokens, 1, 1);
  char* base = static_cast<char*>(d.tiles) - l.counts;
  DispatchArgs a{nullptr, 0, 1, static_cast<int>(d.rows()), 1, d.expert_offsets, d.sorted_token, d.pick_row,
                 reinterpret_cast<int32_t*>(base + l.counts), {}};
  for (int h = 0; h < kMoeTileHeights; ++h) a.tiles[h] = reinterpret_cast<int4*>(base + l.tiles[h]);
  const int64_t threads = std::max<int64_t>(1, d.rows());
  moe_one_expert_dispatch_kernel<<<static_cast<unsigned>((threads + kOneExpertThreads - 1) / kOneExpertThreads),
                                   kOneExpertThreads, 0, stream>>>(a);
  K3_CUDA_CHECK_LAUNCH("moe_one_expert_dispatch_kernel");
}

void moe_gather(const DeviceTensor& x, const MoeDispatch& d, const DeviceTensor& xs, cudaStream_t stream) {
  check_dispatch(d, "moe_gather");
  expect_dtype(xs, DType::kBF16, "moe_gather xs");
  expect_shape(x, d.tokens, x.cols, "moe_gather x");
  expect_shape(xs, d.rows(), x.cols, "moe_gather xs");
  if (!vec8_ok(x) || !vec8_ok(xs)) throw Error("moe_gather: needs cols % 8 == 0 and 16-byte aligned rows, got " + x.describe());
  if (x.cols > INT32_MAX / 2) throw Error("moe_gather: rows too wide");
  if (d.rows() == 0 || x.cols == 0) return;
  const unsigned grid = static_cast<unsigned>((d.rows() + kGatherWarps - 1) / kGatherWarps);
  const int rows = static_cast<int>(d.rows()), cols = static_cast<int>(x.cols);
  if (x.dtype == DType::kF32) {
    moe_gather_kernel<float><<<grid, kGatherWarps * 32, 0, stream>>>(x.as<const float>(), x.ld, d.sorted_token,
                                                                     xs.as<bf16>(), xs.ld, rows, cols);
  } else if (x.dtype == DType::kBF16) {
    moe_gather_kernel<bf16><<<grid, kGatherWarps * 32, 0, stream>>>(x.as<const bf16>(), x.ld, d.sorted_token,
                                                                    xs.as<bf16>(), xs.ld, rows, cols);
  } else {
    throw Error("moe_gather: x must be f32 or bf16, got " + x.describe());
  }
  K3_CUDA_CHECK_LAUNCH("moe_gather_kernel");
}

namespace {

template <typename Ty, typename To>
void launch_combine(const DeviceTensor& ys, const MoeDispatch& d, const DeviceTensor& weights, const DeviceTensor& out,
                    bool accumulate, cudaStream_t stream) {
  const unsigned col_blocks = static_cast<unsigned>((out.cols / kVec + kCombineThreads - 1) / kCombineThreads);
  moe_combine_kernel<Ty, To><<<dim3(static_cast<unsigned>(d.tokens), col_blocks), kCombineThreads, 0, stream>>>(
      ys.as<const Ty>(), ys.ld, d.pick_row, static_cast<const float*>(weights.data), weights.ld, out.as<To>(), out.ld,
      static_cast<int>(d.top_k), static_cast<int>(out.cols), accumulate);
  K3_CUDA_CHECK_LAUNCH("moe_combine_kernel");
}

}  // namespace

void moe_row_weights(const DeviceTensor& weights, const MoeDispatch& d, float* row_weight, cudaStream_t stream) {
  check_dispatch(d, "moe_row_weights");
  expect_dtype(weights, DType::kF32, "moe_row_weights weights");
  expect_shape(weights, d.tokens, d.top_k, "moe_row_weights weights");
  if (row_weight == nullptr) throw Error("moe_row_weights: no row_weight buffer");
  if (d.rows() == 0) return;
  const int picks = static_cast<int>(d.rows());
  moe_row_weights_kernel<<<static_cast<unsigned>((picks + kRowWeightThreads - 1) / kRowWeightThreads), kRowWeightThreads,
                           0, stream>>>(weights.as<const float>(), weights.ld, d.pick_row, static_cast<int>(d.top_k),
                                        picks, row_weight);
  K3_CUDA_CHECK_LAUNCH("moe_row_weights_kernel");
}

void moe_combine(const DeviceTensor& ys, const MoeDispatch& d, const DeviceTensor& weights, const DeviceTensor& out,
                 bool accumulate, cudaStream_t stream) {
  check_dispatch(d, "moe_combine");
  if (weights.data != nullptr) {
    expect_dtype(weights, DType::kF32, "moe_combine weights");
    expect_shape(weights, d.tokens, d.top_k, "moe_combine weights");
  }
  expect_shape(ys, d.rows(), out.cols, "moe_combine ys");
  expect_shape(out, d.tokens, out.cols, "moe_combine out");
  if (!vec8_ok(ys) || !vec8_ok(out)) throw Error("moe_combine: needs cols % 8 == 0 and 16-byte aligned rows, got " + ys.describe());
  if (d.top_k > kMaxTopK) throw Error("moe_combine: top-k above 256");
  if (d.tokens > INT32_MAX || out.cols > INT32_MAX / 2) throw Error("moe_combine: too large, got " + out.describe());
  if (d.tokens == 0 || out.cols == 0) return;
  const bool yf = ys.dtype == DType::kF32, of = out.dtype == DType::kF32;
  if ((!yf && ys.dtype != DType::kBF16) || (!of && out.dtype != DType::kBF16)) {
    throw Error("moe_combine: f32 or bf16 only, got " + ys.describe() + " -> " + out.describe());
  }
  if (yf && of) launch_combine<float, float>(ys, d, weights, out, accumulate, stream);
  if (yf && !of) launch_combine<float, bf16>(ys, d, weights, out, accumulate, stream);
  if (!yf && of) launch_combine<bf16, float>(ys, d, weights, out, accumulate, stream);
  if (!yf && !of) launch_combine<bf16, bf16>(ys, d, weights, out, accumulate, stream);
}

}  // namespace k3::cuda
