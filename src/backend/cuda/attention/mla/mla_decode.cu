// MLA decode attention in the absorbed form (spec §5, §10; CPU reference attend_absorbed in
// backend/cpu/mla.cpp): all heads of one query token share the sequence's 576-wide latent rows, so
// a CTA takes a block of 16·MT heads as the M side of two tensor-core products per 64-token tile
//   S = Q_abs [16MT × 576] · rowsᵀ,   O += P [16MT × 64] · rows[:, :512]
// (mma.sync m16n8k16, bf16 operands through ldmatrix, fp32 accumulation). Tiles of 64 cache rows come
// from the paged cache through bulk copies (cp.async.bulk + mbarrier), double-buffered. The softmax
// runs on S in shared memory (online max / sum per head, fp32; P rounded to bf16 and the sums taken
// over the rounded values). Grid: (head blocks, ranges): a CTA takes one range of one sequence's tiles
// (the per-sequence schedule) and leaves the output, or its normalised partial O and log2-sum-exp
// that the combine kernel merges (split-K over the sequence, as FlashDecoding).
// Arithmetic intensity with H = 96 heads: 96·(576+512)·2 FLOP per 1152-byte row ≈ 181 FLOP/B, where
// the tensor cores bound the step: the wgmma kernel (mla_decode_wgmma.cu) takes such head counts, and
// mla_decode_kernel_for below is the one place that chooses between the two.
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "backend/cuda/core/bulk_copy.cuh"
#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/launch.h"
#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/attention/mla/mla_decode.cuh"
#include "backend/cuda/attention/mla/mla_decode_ranges.h"
#include "backend/cuda/attention/mla/mla_util.cuh"
#include "backend/cuda/core/tensor_map.h"

namespace k3::cuda {
namespace {

using namespace mla_detail;
constexpr int kThreads = 256, kWarps = 8;
constexpr int BN = kMlaDecodeTile;  // 64 tokens
constexpr int LDR = kMlaRow + 8;    // 584 bf16 = 1168 bytes: row starts rotate by 4 banks
constexpr int LDS = BN + 4;
constexpr int LDP = BN + 8;
constexpr int kKSteps = kMlaRow / 16;  // 36

template <int MT>
struct Smem {
  bf16 q[16 * MT][LDR];
  bf16 kv[2][BN][LDR];
  float s[16 * MT][LDS];
  bf16 p[16 * MT][LDP];
  float m[16 * MT], l[16 * MT], alpha[16 * MT];
  uint64_t bar[2];  // bulk-copy barriers of the two tile buffers
};

template <int MT>
__global__ void __launch_bounds__(kThreads, 1) mla_decode_kernel(DecodeArgs a) {
  constexpr int R = 16 * MT;           // head rows
  constexpr int WPM = kWarps / MT;     // warps per 16-row m-tile
  constexpr int NS = MT;               // S n-tiles (of 8 tokens) per warp
  constexpr int NCOL = kMlaRank / WPM; // O columns per warp
  constexpr int NO = NCOL / 8;         // O n-tiles per warp
  constexpr int TPR = kThreads / R;    // softmax threads per row
  constexpr int CPT = BN / TPR;        // softmax columns per thread
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem<MT>& sm = *reinterpret_cast<Smem<MT>*>(smem_raw);
  const int hb = blockIdx.x, c = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int h0 = hb * R;
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the layout, Q and the cache are written
  asm volatile("griddepcontrol.launch_dependents;");
  const int g_begin = a.work.cta_begin[c], g_end = a.work.cta_begin[c + 1];
  if (g_begin >= g_end) return;  // nothing left for this range
  // The per-sequence schedule: the range lies within one sequence.
  const int b = a.work.cta_seq[c], seq0 = a.work.seq_begin[b];
  const bool whole = g_begin == seq0 && g_end == a.work.seq_begin[b + 1];
  const int64_t slot = static_cast<int64_t>(c) + b;
  const int len = a.seqlens[b];
  const int t_begin = g_begin - seq0, t_end = g_end - seq0;
  for (int idx = tid; idx < R * (kMlaRow / 8); idx += kThreads) {
    const int r = idx / (kMlaRow / 8), ch = idx % (kMlaRow / 8);
    const bool ok = h0 + r < a.heads;
    const bf16* src = ok ? a.q + static_cast<int64_t>(b) * a.ldq + static_cast<int64_t>(h0 + r) * kMlaRow + ch * 8 : a.q;
    cp_async16(&sm.q[r][ch * 8], src, ok ? 16 : 0);
  }
  if (tid < R) sm.m[tid] = -INFINITY, sm.l[tid] = 0.0f;
  const int32_t* bt = a.block_table + static_cast<int64_t>(b) * a.bt_ld;
  // Bulk-copy form: a tile is 64 consecutive rows of one page (page_size % 64 == 0), copied row by
  // row (1152 bytes) into the padded shared rows by warp 0; rows past the sequence are not copied
  // and keep earlier finite values (zeros at first), which the mask gives weight 0.
  auto load_tile_tma = [&](int tile, int buf) {
    if (warp == 0) {
      const int j0 = tile * BN, rows = min(BN, len - j0);
      const bf16* src0 = a.cache + (static_cast<int64_t>(bt[j0 / a.page_size]) * a.page_size + j0 % a.page_size) * kMlaRow;
      if (lane == 0) bulk::arrive_expect(&sm.bar[buf], static_cast<unsigned>(rows * kMlaRow * 2));
      __syncwarp();
      for (int r = lane; r < rows; r += 32) bulk::copy(&sm.kv[buf][r][0], src0 + r * kMlaRow, kMlaRow * 2, &sm.bar[buf]);
    }
  };
  {
    uint4* z = reinterpret_cast<uint4*>(&sm.kv[0][0][0]);
    for (int idx = tid; idx < static_cast<int>(sizeof(sm.kv) / 16); idx += kThreads) z[idx] = make_uint4(0, 0, 0, 0);
    bulk::fence_proxy_async();
    if (tid == 0) {
      bulk::init(&sm.bar[0]);
      bulk::init(&sm.bar[1]);
      bulk::fence_init();
    }
    cp_commit();  // the Q rows
    __syncthreads();
    load_tile_tma(t_begin, 0);
  }

  const int mt = warp / WPM, wn = warp % WPM;
  float o[NO][4];
#pragma unroll
  for (int nt = 0; nt < NO; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;

  for (int tile = t_begin; tile < t_end; ++tile) {
    const int buf = (tile - t_begin) & 1;
    if (tile + 1 < t_end) load_tile_tma(tile + 1, buf ^ 1);
    cp_wait<0>();
    bulk::wait(&sm.bar[buf], static_cast<unsigned>(((tile - t_begin) >> 1) & 1));
    __syncthreads();
    // S for this warp's m-tile and NS n-tiles.
    {
      float sc[NS][4];
#pragma unroll
      for (int i = 0; i < NS; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll 4
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t qa[4];
        load_a_ldsm(qa, &sm.q[0][0], LDR, mt * 16, kk * 16, lane);
        if constexpr (NS % 2 == 0) {
#pragma unroll
          for (int i = 0; i < NS; i += 2) {
            uint32_t bb[4];
            load_b_nk_ldsm(bb, &sm.kv[buf][0][0], LDR, (wn * NS + i) * 8, kk * 16, lane);
            mma_bf16(sc[i], qa, bb[0], bb[1]);
            mma_bf16(sc[i + 1], qa, bb[2], bb[3]);
          }
        } else {
#pragma unroll
          for (int i = 0; i < NS; ++i) {
            uint32_t b0, b1;
            load_b_nk_ldsm1(b0, b1, &sm.kv[buf][0][0], LDR, (wn * NS + i) * 8, kk * 16, lane);
            mma_bf16(sc[i], qa, b0, b1);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < NS; ++i) {
        const int col = (wn * NS + i) * 8 + 2 * t;
        sm.s[mt * 16 + g][col] = sc[i][0];
        sm.s[mt * 16 + g][col + 1] = sc[i][1];
        sm.s[mt * 16 + g + 8][col] = sc[i][2];
        sm.s[mt * 16 + g + 8][col + 1] = sc[i][3];
      }
    }
    __syncthreads();
    // Online softmax: TPR consecutive threads per head row.
    {
      const int row = tid / TPR, part = tid % TPR;
      float x[CPT];
      float mx = -INFINITY;
#pragma unroll
      for (int e = 0; e < CPT; ++e) {
        const int col = part * CPT + e;
        x[e] = tile * BN + col < len ? sm.s[row][col] * a.scale_log2 : -INFINITY;
        mx = fmaxf(mx, x[e]);
      }
#pragma unroll
      for (int sh = TPR / 2; sh > 0; sh >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, sh));
      const float m_old = sm.m[row];
      const float m_new = fmaxf(m_old, mx);  // finite: every tile of a split holds a valid token
      float sum = 0.0f;
#pragma unroll
      for (int e = 0; e < CPT; ++e) {
        const float p = bf16_round(exp2f(x[e] - m_new));
        sum += p;
        sm.p[row][part * CPT + e] = __float2bfloat16_rn(p);
      }
#pragma unroll
      for (int sh = TPR / 2; sh > 0; sh >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, sh);
      if (part == 0) {
        const float al = exp2f(m_old - m_new);
        sm.alpha[row] = al;
        sm.m[row] = m_new;
        sm.l[row] = sm.l[row] * al + sum;
      }
    }
    __syncthreads();
    // O += P · rows[:, this warp's NCOL columns of the 512].
    {
      const float al0 = sm.alpha[mt * 16 + g], al1 = sm.alpha[mt * 16 + g + 8];
#pragma unroll
      for (int nt = 0; nt < NO; ++nt) o[nt][0] *= al0, o[nt][1] *= al0, o[nt][2] *= al1, o[nt][3] *= al1;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t pa[4];
        load_a_ldsm(pa, &sm.p[0][0], LDP, mt * 16, kk * 16, lane);
#pragma unroll
        for (int nt = 0; nt < NO; nt += 2) {
          uint32_t bb[4];
          load_b_kn_ldsm(bb, &sm.kv[buf][0][0], LDR, kk * 16, wn * NCOL + nt * 8, lane);
          mma_bf16(o[nt], pa, bb[0], bb[1]);
          mma_bf16(o[nt + 1], pa, bb[2], bb[3]);
        }
      }
    }
    __syncthreads();
  }
  cp_wait<0>();

  // Epilogue: O / l, to the output (a whole sequence) or the segment's partial with its log2-sum-exp.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = mt * 16 + g + half * 8;
    const int h = h0 + r;
    if (h >= a.heads) continue;
    const float inv = 1.0f / sm.l[r];
    float* dst = whole ? a.out + static_cast<int64_t>(b) * a.ldo + static_cast<int64_t>(h) * kMlaRank
                       : a.part + (slot * a.heads + h) * kMlaRank;
#pragma unroll
    for (int nt = 0; nt < NO; ++nt) {
      const int col = wn * NCOL + nt * 8 + 2 * t;
      *reinterpret_cast<float2*>(dst + col) = make_float2(o[nt][half * 2] * inv, o[nt][half * 2 + 1] * inv);
    }
  }
  if (!whole && tid < R && h0 + tid < a.heads) a.lse[slot * a.heads + h0 + tid] = sm.m[tid] + log2f(sm.l[tid]);
}

// The ranges (DecodeWork) from the device seqlens, one CTA of 1024 threads. `ctas`: the grid's
// ranges per head block, at least those of the layout taken (the rest are left empty).
__global__ void __launch_bounds__(1024) mla_decode_schedule_kernel(const int32_t* __restrict__ seqlens, int batch,
                                                                   MlaDecodeSchedule schedule, int balanced_ranges,
                                                                   int splits, int ctas, DecodeWork w) {
  __shared__ int32_t sums[1024];
  __shared__ int32_t max_tiles, min_tiles;
  // The decode kernel (a programmatic dependent when the plan is chained) may launch now: it waits
  // for this grid's completion before it reads the layout.
  asm volatile("griddepcontrol.launch_dependents;");
  const int tid = threadIdx.x, nt = blockDim.x;
  auto tiles = [&](int b) { return (max(seqlens[b], 0) + BN - 1) / BN; };
  // seq_begin: an exclusive scan of the tile counts, each thread a contiguous chunk of sequences.
  const int per = (batch + nt - 1) / nt, lo = min(batch, tid * per), hi = min(batch, lo + per);
  int sum = 0, longest = 0, shortest = INT_MAX;
  for (int b = lo; b < hi; ++b) {
    const int n = tiles(b);
    sum += n, longest = max(longest, n);
    if (n > 0) shortest = min(shortest, n);
  }
  if (tid == 0) max_tiles = 0, min_tiles = INT_MAX;
  sums[tid] = sum;
  __syncthreads();
  atomicMax(&max_tiles, longest);
  atomicMin(&min_tiles, shortest);
  for (int off = 1; off < nt; off <<= 1) {
    const int v = tid >= off ? sums[tid - off] : 0;
    __syncthreads();
    sums[tid] += v;
    __syncthreads();
  }
  int run = sums[tid] - sum;
  for (int b = lo; b < hi; ++b) w.seq_begin[b] = run, run += tiles(b);
  const int total = sums[nt - 1];
  if (tid == 0) w.seq_begin[batch] = total;
  __syncthreads();
  const mla_ranges::Layout layout =
      mla_ranges::make_layout(schedule == MlaDecodeSchedule::kBalanced, schedule == MlaDecodeSchedule::kAdaptive, batch,
                              total, max_tiles, min_tiles, balanced_ranges, splits);
  for (int c = tid; c <= ctas; c += nt) w.cta_begin[c] = layout.begin(w.seq_begin, batch, c);
  for (int b = tid; b < batch; b += nt) {
    int first = 0, last = 0;
    if (w.seq_begin[b] < w.seq_begin[b + 1]) first = layout.first(w.seq_begin, b), last = layout.last(w.seq_begin, b);
    w.first_cta[b] = first, w.last_cta[b] = last;
    int r0 = 0, r1 = -1;
    layout.ranges_of(w.seq_begin, batch, b, r0, r1);
    for (int c = r0; c <= r1; ++c) w.cta_seq[c] = b;
  }
}

// o[b][h] = Σ_s 2^{lse_s − M} part_s / Σ_s 2^{lse_s − M} over sequence b's segments, one CTA per
// (head, sequence); a sequence in one segment was written by the decode kernel, one with no tiles
// gets zeros.
__global__ void __launch_bounds__(128) mla_combine_kernel(const float* __restrict__ part, const float* __restrict__ lse,
                                                          int heads, DecodeWork w, float* __restrict__ out, int64_t ldo) {
  const int h = blockIdx.x, b = blockIdx.y;
  const int c = threadIdx.x * 4;
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the decode kernel's partials and outputs
  float* dst = out + static_cast<int64_t>(b) * ldo + static_cast<int64_t>(h) * kMlaRank + c;
  if (w.seq_begin[b] == w.seq_begin[b + 1]) {
    *reinterpret_cast<float4*>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return;
  }
  const int c0 = w.first_cta[b], n = w.last_cta[b] - c0 + 1;
  if (n == 1) return;
  // Sequence b's segments: slots c0 + b … c0 + b + n − 1 (each of those ranges holds tiles of b).
  const float* l = lse + (static_cast<int64_t>(c0) + b) * heads + h;
  float mx = -INFINITY;
  for (int r = 0; r < n; ++r) mx = fmaxf(mx, l[static_cast<int64_t>(r) * heads]);
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float wsum = 0.0f;
  const float* p = part + ((static_cast<int64_t>(c0) + b) * heads + h) * kMlaRank + c;
  for (int r = 0; r < n; ++r) {
    const float wt = exp2f(l[static_cast<int64_t>(r) * heads] - mx);
    wsum += wt;
    const float4 v = *reinterpret_cast<const float4*>(p + static_cast<int64_t>(r) * heads * kMlaRank);
    acc.x += wt * v.x, acc.y += wt * v.y, acc.z += wt * v.z, acc.w += wt * v.w;
  }
  const float inv = 1.0f / wsum;
  *reinterpret_cast<float4*>(dst) = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
}

template <int MT>
void launch(const DecodeArgs& a, int ctas, bool chained, cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(Smem<MT>));
  allow_dynamic_smem(mla_decode_kernel<MT>, smem);
  const dim3 grid(static_cast<unsigned>((a.heads + 16 * MT - 1) / (16 * MT)), static_cast<unsigned>(ctas));
  launch_kernel(chained, mla_decode_kernel<MT>, grid, dim3(kThreads), static_cast<size_t>(smem), stream, a);
}

int head_rows(int heads) { return heads <= 16 ? 16 : 32; }

// From this many heads the wgmma kernel is at least as fast as the mma.sync one at every measured
// batch and context (docs/performance.md, MLA decode); below it, its 32-head tile would be mostly padding.
constexpr int kMlaWgmmaMinHeads = 16;

// CTAs per range: head blocks of the mma.sync kernel, head groups of the wgmma kernel.
int blocks_per_sequence(int heads, MlaDecodeKernel kernel) {
  if (kernel == MlaDecodeKernel::kWgmma) return wgmma_head_groups(heads);
  return (heads + head_rows(heads) - 1) / head_rows(heads);
}

MlaDecodeKernel resolve(MlaDecodeKernel kernel, int heads) {
  return kernel == MlaDecodeKernel::kAuto ? mla_decode_kernel_for(heads) : kernel;
}

}  // namespace

MlaDecodeKernel mla_decode_kernel_for(int heads) {
  return heads >= kMlaWgmmaMinHeads ? MlaDecodeKernel::kWgmma : MlaDecodeKernel::kMma;
}

MlaDecodePlan mla_decode_plan(int batch, int heads, int max_seqlen, int multiprocessors, MlaDecodeKernel kernel,
                              MlaDecodeSchedule schedule, int count) {
  MlaDecodePlan plan;
  plan.kernel = resolve(kernel, heads);
  plan.schedule = schedule != MlaDecodeSchedule::kAuto ? schedule
                  : plan.kernel == MlaDecodeKernel::kWgmma ? MlaDecodeSchedule::kAdaptive
                                                           : MlaDecodeSchedule::kPerSequence;
  // One CTA per multiprocessor (both kernels take ~150-220 KB of shared memory).
  const int slots = std::max(1, multiprocessors / blocks_per_sequence(heads, plan.kernel));
  plan.balanced_ranges = count > 0 ? count : slots;
  if (count > 0) {
    plan.splits = count;
    return plan;
  }
  const int tiles = std::max(1, (max_seqlen + BN - 1) / BN);
  float best_cost = 1e30f;
  for (int s = 1; s <= std::min(tiles, 256); ++s) {
    const int tps = (tiles + s - 1) / s;
    if ((tiles + tps - 1) / tps != s) continue;  // only split counts without empty tails
    const float cost = mla_ranges::per_sequence_cost(std::max(1, batch), tiles, s, slots);
    if (cost < best_cost - 1e-6f) plan.splits = s, best_cost = cost;
  }
  return plan;
}

namespace {

// The workspace: the range layout (int32), then the partials and their log2-sum-exps.
struct WorkspaceLayout {
  int ctas = 0;       // ranges per head block: the grid
  int64_t slots = 0;  // partial slots (0: every segment is a whole sequence)
  size_t ints_bytes = 0, bytes = 0;
};

WorkspaceLayout workspace_layout(const MlaDecodePlan& plan, int batch, int heads) {
  WorkspaceLayout l;
  const int per_sequence = batch * plan.splits;
  l.ctas = plan.schedule == MlaDecodeSchedule::kBalanced       ? plan.balanced_ranges
           : plan.schedule == MlaDecodeSchedule::kPerSequence ? per_sequence
                                                               : std::max(plan.balanced_ranges, per_sequence);
  const bool all_whole = plan.schedule == MlaDecodeSchedule::kPerSequence && plan.splits == 1;
  l.slots = all_whole ? 0 : static_cast<int64_t>(l.ctas) + batch;
  l.ints_bytes = (static_cast<size_t>(3 * batch + 2 * l.ctas + 2) * sizeof(int32_t) + 255) / 256 * 256;
  l.bytes = l.ints_bytes + static_cast<size_t>(l.slots) * heads * (kMlaRank + 1) * sizeof(float);
  return l;
}

}  // namespace

size_t mla_decode_workspace_bytes(const MlaDecodePlan& plan, int batch, int heads) {
  return workspace_layout(plan, batch, heads).bytes;
}

void mla_decode_attention(const DeviceTensor& q_abs, const MlaPagedCache& cache, const int32_t* seqlens, int batch,
                          float scale, const MlaDecodePlan& plan, void* workspace, const DeviceTensor& o_lat,
                          cudaStream_t stream) {
  const int64_t H = q_abs.cols / kMlaRow;
  if (q_abs.cols % kMlaRow != 0 || H == 0) throw Error("mla_decode_attention: q_abs must be [B, H·576], got " + q_abs.describe());
  expect_dtype(q_abs, DType::kBF16, "mla_decode_attention q_abs");
  expect_shape(q_abs, batch, H * kMlaRow, "mla_decode_attention q_abs");
  expect_dtype(o_lat, DType::kF32, "mla_decode_attention o_lat");
  expect_shape(o_lat, batch, H * kMlaRank, "mla_decode_attention o_lat");
  if (cache.page_size <= 0 || cache.page_size % BN != 0) {
    throw Error("mla_decode_attention: page size " + std::to_string(cache.page_size) + " is not a multiple of 64");
  }
  if ((reinterpret_cast<uintptr_t>(q_abs.data) % 16) != 0 || (q_abs.ld * 2) % 16 != 0 ||
      (reinterpret_cast<uintptr_t>(cache.rows) % 16) != 0 || (o_lat.ld % 4) != 0) {
    throw Error("mla_decode_attention: needs 16-byte aligned rows");
  }
  if (plan.kernel == MlaDecodeKernel::kAuto || plan.schedule == MlaDecodeSchedule::kAuto || plan.balanced_ranges < 1 ||
      plan.splits < 1) {
    throw Error("mla_decode_attention: the plan is not resolved (mla_decode_plan makes one)");
  }
  if (plan.kernel == MlaDecodeKernel::kMma && plan.schedule != MlaDecodeSchedule::kPerSequence) {
    throw Error("mla_decode_attention: the mma.sync kernel takes the per-sequence schedule only");
  }
  if (batch == 0) return;
  if (workspace == nullptr) throw Error("mla_decode_attention: needs a workspace (mla_decode_workspace_bytes)");
  const WorkspaceLayout l = workspace_layout(plan, batch, static_cast<int>(H));
  if (l.ctas > 65535) throw Error("mla_decode_attention: " + std::to_string(l.ctas) + " ranges exceed the grid's 65535");
  int32_t* ints = static_cast<int32_t*>(workspace);
  const DecodeWork work{ints, ints + batch + 1, ints + batch + l.ctas + 2, ints + batch + 2 * l.ctas + 2,
                        ints + 2 * batch + 2 * l.ctas + 2};
  float* part = l.slots > 0 ? reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) + l.ints_bytes) : nullptr;
  float* lse = part != nullptr ? part + static_cast<size_t>(l.slots) * H * kMlaRank : nullptr;
  mla_decode_schedule_kernel<<<1, 1024, 0, stream>>>(seqlens, batch, plan.schedule, plan.balanced_ranges, plan.splits,
                                                      l.ctas, work);
  K3_CUDA_CHECK_LAUNCH("mla_decode_schedule_kernel");
  const DecodeArgs a{q_abs.as<const bf16>(), q_abs.ld, static_cast<const bf16*>(cache.rows), cache.page_size,
                     cache.block_table, cache.block_table_ld, seqlens, static_cast<int>(H),
                     scale * 1.4426950408889634f, o_lat.as<float>(), o_lat.ld, part, lse, work};
  if (plan.kernel == MlaDecodeKernel::kWgmma) {
    if (cache.num_rows <= 0) throw Error("mla_decode_attention: the wgmma kernel needs the cache's row count");
    const DeviceTensor rows(const_cast<void*>(cache.rows), DType::kBF16, cache.num_rows, kMlaRow);
    launch_mla_decode_wgmma(a, tensor_map_bf16_sw128(rows, BN, 64, "mla_decode_attention cache"), l.ctas, plan.chained,
                            stream);
  } else {
    head_rows(static_cast<int>(H)) == 16 ? launch<1>(a, l.ctas, plan.chained, stream)
                                         : launch<2>(a, l.ctas, plan.chained, stream);
  }
  if (l.slots > 0) {
    launch_kernel(plan.chained, mla_combine_kernel, dim3(static_cast<unsigned>(H), static_cast<unsigned>(batch)),
                  dim3(kMlaRank / 4), 0, stream, static_cast<const float*>(part), static_cast<const float*>(lse),
                  static_cast<int>(H), work, o_lat.as<float>(), o_lat.ld);
  }
}

}  // namespace k3::cuda
