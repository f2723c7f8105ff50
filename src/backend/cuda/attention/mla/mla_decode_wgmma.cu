// MLA decode attention for many heads per cache row (absorbed form, as mla_decode.cu; Kimi-K3's 96
// heads on one GPU), on Hopper warpgroup MMA. Each cache byte feeds every head, so the kernel is
// bound by the tensor cores, not by memory, and it takes the products transposed: a tile of 64 cache
// rows is the M side (wgmma's M is 64) and the CTA's HC heads (32 or 48) the N side, so that 96 heads
// split into two CTAs of 48 pad nothing (heads as M would pad 96 to 128):
//   Sᵀ [64 × HC]  = tile [64 × 576] · Q_absᵀ      (A: the tile, K-major; B: Q_abs, K-major)
//   Oᵀ [512 × HC] += tile[:, :512]ᵀ · Pᵀ [64 × HC] (A: the same tile read MN-major; B: Pᵀ, K-major)
// The tile comes from the paged cache through the tensor-map bulk copy (9 boxes of 64 rows × 64
// columns, 128-byte swizzle) straight into the layout both products read, double-buffered, with no
// gather. Two warpgroups: each takes half of Sᵀ's 576-long reduction (warpgroup 1 hands its partial
// over through shared memory) and half of Oᵀ's 512 rows (256 rows × HC fp32 accumulators in
// registers). Warpgroup 0 runs the online softmax on Sᵀ in registers. A head is a column spread over
// all 128 threads, so its max over the tile takes shuffles and a pass through shared memory; the
// kernel takes it only when some score passes the head's running max by kRescaleLog2 (one barrier
// with an OR decides), and each thread sums its own P values, reduced over the threads once at the
// end. P is rounded to bf16 and the sums taken over the rounded values as in the mma.sync kernel.
// A CTA takes one range of the batch's tiles (DecodeWork; mla_decode.cu lays the ranges out and
// combines the partials): one segment per sequence the range touches, each with its own Q_abs and
// softmax state, while the loads run one tile ahead across segment boundaries.
#include <cuda_runtime.h>

#include <cmath>

#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/attention/mla/mla_decode.cuh"
#include "backend/cuda/attention/mla/mla_util.cuh"
#include "backend/cuda/core/bulk_copy.cuh"
#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/launch.h"
#include "backend/cuda/core/wgmma.cuh"

namespace k3::cuda::mla_detail {
namespace {

constexpr int kTok = kMlaDecodeTile;               // 64 cache rows per tile: Sᵀ's M
constexpr int kBlocks = kMlaRow / 64;              // 9 column blocks of 64 latent values (128 bytes)
constexpr int kBlockBytes = kTok * 128;            // one [64 rows × 64 values] block
constexpr int kTileBytes = kBlocks * kBlockBytes;  // 72 KB
constexpr int kThreads = 256;                      // two warpgroups
constexpr int kHalfSteps = kMlaRow / 16 / 2;       // 18 of Sᵀ's 36 k16 steps per warpgroup
constexpr int kOTiles = kMlaRank / 64 / 2;         // 4 of Oᵀ's 8 row tiles per warpgroup
// The softmax keeps a head's running max m until a score exceeds it by this much (log2 units): P =
// 2^(s − m) then stays ≤ 256, and the exact tile max with its rescale of O and l is taken only on the
// first tile and when the max grows that far (rarely after the first tiles).
constexpr float kRescaleLog2 = 8.0f;

template <int HC>
struct Smem {
  unsigned char kv[2][kTileBytes];      // the tile buffers (1024-byte aligned: swizzle atoms)
  unsigned char q[kBlocks][HC * 128];   // Q_abs, per column block HC rows of 128 bytes, swizzled
  unsigned char p[HC * 128];            // Pᵀ: HC head rows × 64 tokens, swizzled
  float s_part[HC / 2][128];            // warpgroup 1's Sᵀ partial, by accumulator register and thread
  float red_max[4][HC];                 // per-warp column max (the epilogue: per-warp row sums)
  float alpha[HC];                      // this tile's rescale of O per head, when `rescaled`
  float m[HC], l[HC];                   // the final running max and sum (epilogue)
  int rescaled;
  uint64_t bar[2];
};

__device__ __forceinline__ void bar_sync_wg0() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }

// Whether any thread of warpgroup 0 passes true (a barrier of its 128 threads with an OR).
__device__ __forceinline__ bool any_in_warpgroup0(bool v) {
  uint32_t r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, 1, 128, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(v))
      : "memory");
  return r != 0;
}

template <int HC>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_wgmma_kernel(const __grid_constant__ CUtensorMap cache_map, const DecodeArgs a) {
  constexpr int NJ = HC / 8;  // 8-head column groups of the accumulators
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = bulk::smem_addr(smem_raw);
  Smem<HC>& sm = *reinterpret_cast<Smem<HC>*>(smem_raw + ((1024u - (raw & 1023u)) & 1023u));
  const int hg = blockIdx.x, c = blockIdx.y;
  const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int h0 = hg * HC;
  // Before the schedule kernel completes (a chained launch): only what reads nothing it or the kernels
  // before it write.
  if (tid == 0) {
    bulk::prefetch_tensor_map(&cache_map);
    bulk::init(&sm.bar[0]);
    bulk::init(&sm.bar[1]);
    bulk::fence_init();
    sm.rescaled = 0;
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");  // the layout, Q and the cache are written
  asm volatile("griddepcontrol.launch_dependents;");
  const int32_t* seq_begin = a.work.seq_begin;
  const int r_begin = a.work.cta_begin[c], r_end = a.work.cta_begin[c + 1];  // this CTA's tiles, batch-wide
  if (r_begin >= r_end) return;  // nothing left for this range
  // Thread 0 loads the range's tiles one ahead of the compute, walking the sequences on its own (the
  // current one's tiles [load_first, load_end) kept in registers).
  int load_seq = a.work.cta_seq[c], load_first = seq_begin[load_seq], load_end = seq_begin[load_seq + 1];
  auto load_tile = [&](int tile, int buf) {  // batch-wide tile number: 64 rows of one page
    while (tile >= load_end) load_first = load_end, load_end = seq_begin[++load_seq + 1];
    const int j0 = (tile - load_first) * kTok;
    const int32_t* bt = a.block_table + static_cast<int64_t>(load_seq) * a.bt_ld;
    const int row0 = bt[j0 / a.page_size] * a.page_size + j0 % a.page_size;
    bulk::arrive_expect(&sm.bar[buf], kTileBytes);
    for (int blk = 0; blk < kBlocks; ++blk) bulk::copy_tile_2d(sm.kv[buf] + blk * kBlockBytes, &cache_map, blk * 64, row0, &sm.bar[buf]);
  };
  if (tid == 0) load_tile(r_begin, 0);

  const uint32_t q_lo = wgmma::desc_k_sw128_lo(bulk::smem_addr(sm.q[0]));
  const uint32_t p_lo = wgmma::desc_k_sw128_lo(bulk::smem_addr(sm.p));
  int it = 0;  // tiles computed: buffer it & 1, barrier phase (it >> 1) & 1
  int b = a.work.cta_seq[c];
  // One segment per pass: this range's piece of sequence b.
  for (int tile = r_begin; tile < r_end; ++b) {
    if (tile >= seq_begin[b + 1]) continue;  // a sequence with no tiles
    const int seq0 = seq_begin[b], seg_end = min(r_end, seq_begin[b + 1]);
    const bool whole = tile == seq0 && seg_end == seq_begin[b + 1];
    const int64_t slot = static_cast<int64_t>(c) + b;
    const int len = a.seqlens[b];
    // Q_abs rows of this CTA's heads, swizzled per 64-column block; rows past the heads are zeros.
    // (Q's previous readers, the last tile's wgmmas, finished before that tile's closing barrier.)
    for (int idx = tid; idx < HC * (kMlaRow / 8); idx += kThreads) {
      const int r = idx / (kMlaRow / 8), ch = idx % (kMlaRow / 8);
      uint4 v = make_uint4(0, 0, 0, 0);
      if (h0 + r < a.heads) {
        v = *reinterpret_cast<const uint4*>(a.q + static_cast<int64_t>(b) * a.ldq + static_cast<int64_t>(h0 + r) * kMlaRow + ch * 8);
      }
      *reinterpret_cast<uint4*>(sm.q[ch / 8] + wgmma::sw128_offset(r, ch % 8)) = v;
    }
    bulk::fence_proxy_async();  // written by ordinary stores, read by wgmma
    __syncthreads();
    float o[kOTiles][HC / 2];
#pragma unroll
    for (int mt = 0; mt < kOTiles; ++mt) {
#pragma unroll
      for (int i = 0; i < HC / 2; ++i) o[mt][i] = 0.0f;
    }
    // Warpgroup 0's softmax state for the heads 8j + 2t + e its thread holds: the running max (the same
    // in every thread) and the sum of this thread's own P values (summed over the threads at the end).
    float m_run[NJ][2], l_run[NJ][2];
#pragma unroll
    for (int j = 0; j < NJ; ++j) m_run[j][0] = m_run[j][1] = -INFINITY, l_run[j][0] = l_run[j][1] = 0.0f;

    for (; tile < seg_end; ++tile, ++it) {
      const int buf = it & 1;
      if (tid == 0 && tile + 1 < r_end) load_tile(tile + 1, buf ^ 1);  // its buffer was released below
      bulk::wait(&sm.bar[buf], static_cast<unsigned>((it >> 1) & 1));
      const int valid = min(kTok, len - (tile - seq0) * kTok);
      if (valid < kTok) {
        // Rows past the sequence hold whatever the page holds (NaN included): P gives them weight 0,
        // and 0 · NaN must not reach O, so they become zeros.
        for (int idx = tid; idx < (kTok - valid) * kBlocks * 8; idx += kThreads) {
          const int r = valid + idx / (kBlocks * 8), rem = idx % (kBlocks * 8);
          *reinterpret_cast<uint4*>(sm.kv[buf] + (rem / 8) * kBlockBytes + wgmma::sw128_offset(r, rem % 8)) = make_uint4(0, 0, 0, 0);
        }
        bulk::fence_proxy_async();
        __syncthreads();
      }
      const uint32_t kv_lo = wgmma::desc_k_sw128_lo(bulk::smem_addr(sm.kv[buf]));

      // Sᵀ: this warpgroup's half of the 36 k16 steps.
      float s[HC / 2];
#pragma unroll
      for (int i = 0; i < HC / 2; ++i) s[i] = 0.0f, wgmma::fence_operand(s[i]);
      wgmma::fence();
#pragma unroll
      for (int step = 0; step < kHalfSteps; ++step) {
        const int ks = wg * kHalfSteps + step, blk = ks >> 2, sub = ks & 3;
        wgmma::mma_bf16<HC>(s, wgmma::desc_k_sw128_from_lo(kv_lo + ((blk * kBlockBytes + sub * 32) >> 4)),
                            wgmma::desc_k_sw128_from_lo(q_lo + ((blk * HC * 128 + sub * 32) >> 4)));
      }
      wgmma::commit();
      wgmma::wait<0>();
#pragma unroll
      for (int i = 0; i < HC / 2; ++i) wgmma::fence_operand(s[i]);
      if (wg == 1) {
#pragma unroll
        for (int i = 0; i < HC / 2; ++i) sm.s_part[i][wtid] = s[i];
      }
      __syncthreads();

      if (wg == 0) {
        // Accumulator register 4j + 2h + e holds Sᵀ[row 16·warp + g + 8h][head 8j + 2t + e].
        const int r0 = 16 * warp + g;
        bool grows = false;  // a score above its head's running max by more than kRescaleLog2
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x0 = s[4 * j + e];
            float& x1 = s[4 * j + 2 + e];
            x0 = r0 < valid ? (x0 + sm.s_part[4 * j + e][wtid]) * a.scale_log2 : -INFINITY;
            x1 = r0 + 8 < valid ? (x1 + sm.s_part[4 * j + 2 + e][wtid]) * a.scale_log2 : -INFINITY;
            grows |= fmaxf(x0, x1) > m_run[j][e] + kRescaleLog2;
          }
        }
        const bool rescale = any_in_warpgroup0(grows);
        if (rescale) {  // the exact tile max of every head: the first tile, and when a head's max grows
#pragma unroll
          for (int j = 0; j < NJ; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float mx = fmaxf(s[4 * j + e], s[4 * j + 2 + e]);
              mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 4));
              mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 8));
              mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 16));
              if (g == 0) sm.red_max[warp][8 * j + 2 * t + e] = mx;
            }
          }
          bar_sync_wg0();
#pragma unroll
          for (int j = 0; j < NJ; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int h = 8 * j + 2 * t + e;
              const float tile_max = fmaxf(fmaxf(sm.red_max[0][h], sm.red_max[1][h]), fmaxf(sm.red_max[2][h], sm.red_max[3][h]));
              const float m_new = fmaxf(m_run[j][e], tile_max);  // finite: every tile holds a valid row
              const float al = exp2f(m_run[j][e] - m_new);
              m_run[j][e] = m_new;
              l_run[j][e] *= al;
              if (warp == 0 && g == 0) sm.alpha[h] = al;
            }
          }
        }
        if (wtid == 0) sm.rescaled = rescale;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int h = 8 * j + 2 * t + e;
            const float p0 = bf16_round(exp2f(s[4 * j + e] - m_run[j][e]));
            const float p1 = bf16_round(exp2f(s[4 * j + 2 + e] - m_run[j][e]));
            l_run[j][e] += p0 + p1;
            // Pᵀ[h][token]: head row h, token column r0 (and r0 + 8) of the swizzled 64-token row.
            bf16* prow = reinterpret_cast<bf16*>(sm.p + h * 128);
            prow[(((r0 >> 3) ^ (h & 7)) << 3) + (r0 & 7)] = __float2bfloat16_rn(p0);
            prow[((((r0 + 8) >> 3) ^ (h & 7)) << 3) + (r0 & 7)] = __float2bfloat16_rn(p1);
          }
        }
        bulk::fence_proxy_async();
      }
      __syncthreads();

      // Oᵀ = Oᵀ · diag(alpha) + tile[:, this warpgroup's 256 of the 512]ᵀ · Pᵀ.
      if (sm.rescaled) {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const float al0 = sm.alpha[8 * j + 2 * t], al1 = sm.alpha[8 * j + 2 * t + 1];
#pragma unroll
          for (int mt = 0; mt < kOTiles; ++mt) {
            o[mt][4 * j] *= al0, o[mt][4 * j + 1] *= al1, o[mt][4 * j + 2] *= al0, o[mt][4 * j + 3] *= al1;
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < kOTiles; ++mt) {
#pragma unroll
        for (int i = 0; i < HC / 2; ++i) wgmma::fence_operand(o[mt][i]);
      }
      wgmma::fence();
#pragma unroll
      for (int mt = 0; mt < kOTiles; ++mt) {
        const uint32_t v_lo = wgmma::desc_mn_sw128_lo(bulk::smem_addr(sm.kv[buf] + (wg * kOTiles + mt) * kBlockBytes));
#pragma unroll
        for (int kk = 0; kk < kTok / 16; ++kk) {
          wgmma::mma_bf16<HC, 1>(o[mt], wgmma::desc_k_sw128_from_lo(v_lo + ((kk * 16 * 128) >> 4)),
                                 wgmma::desc_k_sw128_from_lo(p_lo + ((kk * 32) >> 4)));
        }
      }
      wgmma::commit();
      wgmma::wait<0>();
#pragma unroll
      for (int mt = 0; mt < kOTiles; ++mt) {
#pragma unroll
        for (int i = 0; i < HC / 2; ++i) wgmma::fence_operand(o[mt][i]);
      }
      __syncthreads();  // the tile buffer and Pᵀ are free again
    }

    // Epilogue: the row sums of warpgroup 0's threads summed per head, then Oᵀ / l to the output (a
    // whole sequence) or the segment's partial, with its log2-sum-exp.
    if (wg == 0) {
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float l = l_run[j][e];
          l += __shfl_xor_sync(0xFFFFFFFFu, l, 4);
          l += __shfl_xor_sync(0xFFFFFFFFu, l, 8);
          l += __shfl_xor_sync(0xFFFFFFFFu, l, 16);
          if (g == 0) sm.red_max[warp][8 * j + 2 * t + e] = l;
          if (warp == 0 && g == 0) sm.m[8 * j + 2 * t + e] = m_run[j][e];
        }
      }
    }
    __syncthreads();
    if (tid < HC) sm.l[tid] = (sm.red_max[0][tid] + sm.red_max[1][tid]) + (sm.red_max[2][tid] + sm.red_max[3][tid]);
    __syncthreads();
    float* dst = whole ? a.out + static_cast<int64_t>(b) * a.ldo : a.part + slot * a.heads * kMlaRank;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int h = 8 * j + 2 * t + e;
        if (h0 + h >= a.heads) continue;
        const float inv = 1.0f / sm.l[h];
        float* dh = dst + static_cast<int64_t>(h0 + h) * kMlaRank;
#pragma unroll
        for (int mt = 0; mt < kOTiles; ++mt) {
          const int v = (wg * kOTiles + mt) * 64 + 16 * warp + g;
          dh[v] = o[mt][4 * j + e] * inv;
          dh[v + 8] = o[mt][4 * j + 2 + e] * inv;
        }
      }
    }
    if (!whole && tid < HC && h0 + tid < a.heads) a.lse[slot * a.heads + h0 + tid] = sm.m[tid] + log2f(sm.l[tid]);
  }
}

template <int HC>
void launch(const DecodeArgs& a, const CUtensorMap& map, int ranges, bool chained, cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(Smem<HC>)) + 1024;
  allow_dynamic_smem(mla_decode_wgmma_kernel<HC>, smem);
  const dim3 grid(static_cast<unsigned>((a.heads + HC - 1) / HC), static_cast<unsigned>(ranges));
  launch_kernel(chained, mla_decode_wgmma_kernel<HC>, grid, dim3(kThreads), static_cast<size_t>(smem), stream, map, a);
}

}  // namespace

int wgmma_heads_per_cta(int heads) {
  const int groups = (heads + 47) / 48;
  return (heads + groups - 1) / groups <= 32 ? 32 : 48;
}

void launch_mla_decode_wgmma(const DecodeArgs& a, const CUtensorMap& cache_map, int ranges, bool chained,
                             cudaStream_t stream) {
  wgmma_heads_per_cta(a.heads) == 32 ? launch<32>(a, cache_map, ranges, chained, stream)
                                     : launch<48>(a, cache_map, ranges, chained, stream);
}

}  // namespace k3::cuda::mla_detail
