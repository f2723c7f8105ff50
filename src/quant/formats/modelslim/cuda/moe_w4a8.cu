// The grouped GEMM of the ModelSlim W4A8 experts (moe_w4a8.h) on integer tensor cores (the per-row
// int8 activation quantisation: moe_w4a8_quantize.cu).
//
// GEMM: swapped operands as moe_w4_gemm.cuh — C[feature][token] = Σ_k q[feature][k] · c[token][k] with
// the weights as the mma A operand (m16 = 16 weight rows, widened from the bank's fragment-ordered
// int4 words in registers: one mask per s8x4 register, moe_w4a8_layout.h) and the expert's sorted int8
// rows as B (n8 = 8 tokens, ldmatrix from a cp.async ring of STAGES stages in shared memory, P 64-column
// chunks per stage). mma.sync m16n8k32 s8·s8 → s32: two k32 steps per chunk, one 16-byte word of codes
// per lane per 16-row group and chunk. A stage's codes are copied into shared memory with cp.async in
// the commit group of that stage's activations, so STAGES − 1 stages of codes are in flight (a register
// prefetch holds too few bytes to cover HBM latency: docs/decisions/w4a8-tile-choice.md); a lane copies
// and reads back only its own 16 bytes per (group, chunk), so the wait that lands a stage is all the
// codes need (the barrier after it is the activations'). Grouped scales go into registers with __ldg at
// the start of their stage.
// Per scale group the exact int32 sums (16·Σ q·c) are folded into an fp32 accumulator with one fma by
// the group's scale (per channel: once, in the epilogue); the epilogue applies 1/16 (exact), the row's
// activation scale and out_scale, then stores transposed.
#include <cuda_bf16.h>

#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/attention/mla/mla_util.cuh"
#include "quant/formats/modelslim/cuda/moe_w4a8_internal.h"
#include "quant/formats/modelslim/cuda/moe_w4a8_layout.h"
#include "backend/cuda/moe/moe_tile.cuh"

namespace k3::cuda::w4a8 {
namespace {

using namespace mla_detail;  // cp.async, ldmatrix, bf16 packing

// ---- grouped GEMM -------------------------------------------------------------------------------------

__device__ __forceinline__ void mma_s8(int32_t (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// BT tokens per CTA (the tile map's height), MT 16-row weight groups per warp, P 64-column chunks per
// pipeline stage, STAGES pipeline stages (activations and codes).
template <int BT_, int MT_, int WARPS_, int P_, int STAGES_, int MIN_BLOCKS>
struct Cfg {
  static constexpr int BT = BT_, MT = MT_, WARPS = WARPS_, P = P_, STAGES = STAGES_, kMinBlocks = MIN_BLOCKS;
  static constexpr int kThreads = WARPS * 32;
  static constexpr int BF = 16 * MT * WARPS;     // weight rows (output features) per CTA
  static constexpr int BK = P * kChunk;          // columns (bytes of int8 activations) per stage
  static constexpr int LDS = BK + 16;            // padded shared row: an odd number of 16-byte units
  static constexpr int NT = BT / 8;              // n8 token fragments
  static constexpr int kXChunks = BT * BK / 16;  // 16-byte activation chunks per stage
  static constexpr int kXBytes = STAGES * BT * LDS;  // the activation ring, at the start of shared memory
  // The code ring after it: per stage [WARPS][P][MT][32 lanes] × 16 bytes.
  static constexpr int kWStageBytes = WARPS * P * MT * kChunkCodeBytes;
  static constexpr int kSmemBytes = kXBytes + STAGES * kWStageBytes;
  static_assert(NT % 2 == 0, "tokens in ldmatrix.x4 pairs of n8 fragments");
  static_assert(kXBytes % 16 == 0, "16-byte aligned code ring");
  // 228 KB of shared memory per SM (H100 / H200), 1 KB of it reserved per CTA.
  static_assert(kMinBlocks * (kSmemBytes + 1024) <= 228 * 1024, "kMinBlocks CTAs per SM must fit shared memory");
};

__device__ __forceinline__ void store_pair(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
__device__ __forceinline__ void store_pair(bf16* p, float a, float b) { *reinterpret_cast<uint32_t*>(p) = pack_bf16(a, b); }

template <class C, bool kGrouped, typename Tout>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    moe_w4a8_kernel(GemmArgs a, int n_tiles, const int32_t* __restrict__ tile_count, const int4* __restrict__ tiles) {
  constexpr int BT = C::BT, MT = C::MT, P = C::P, STAGES = C::STAGES, LDS = C::LDS, NT = C::NT;
  detail::MoeCtaTile ct;
  if (!detail::moe_cta_tile(n_tiles, BT, C::BF, tile_count, tiles, a.offsets, ct)) return;
  const int expert = ct.expert, r0 = ct.row0, rows = ct.rows, n0 = ct.col0;
  const int nv = (rows + 7) / 8;  // n8 fragments holding rows of this expert

  extern __shared__ __align__(128) unsigned char smem_raw[];
  int8_t* sx = reinterpret_cast<int8_t*>(smem_raw);  // [STAGES][BT][LDS]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int f_warp = n0 + warp * MT * 16;                   // the warp's first weight row within the expert
  const int mvalid = max(0, min(MT, (a.n - f_warp) / 16));  // its 16-row groups inside N
  const int kchunks = a.k / kChunk, cpg = a.group / kChunk, groups = a.k / a.group;
  const int ktiles = (kchunks + P - 1) / P;

  // Group m of the warp, chunk c: codes at wc + (m·kchunks + c)·512; scale group j at ws + (m·groups + j)·16.
  const int64_t group0 = (static_cast<int64_t>(expert) * a.n + f_warp) / kRowGroup;
  const uint8_t* wc = a.codes + group0 * kchunks * kChunkCodeBytes + lane * 16;
  const float* ws = a.scales + group0 * groups * kRowGroup + (lane >> 2) * 2;
  // Groups past N are neither loaded nor stored; the mma multiplies whatever their shared words hold.
  float2 sbuf[P][MT] = {};  // grouped: the scales of the group a chunk closes
  auto load_scale = [&](int c, int p, int m) {  // group m's scales of the group chunk c closes, if any
    if (kGrouped && (c + 1) % cpg == 0) {
      sbuf[p][m] = __ldg(reinterpret_cast<const float2*>(ws + (static_cast<int64_t>(m) * groups + c / cpg) * kRowGroup));
    }
  };
  // The lane's 16 bytes of group m, chunk p of stage slot i at sw + i·kWStageBytes + (p·MT + m)·512.
  // A lane reads back only what it copied: its cp_wait lands a stage, and the __syncthreads that follows
  // the wait of the next stage orders those reads before the slot's refill.
  unsigned char* sw = smem_raw + C::kXBytes + warp * P * MT * kChunkCodeBytes + lane * 16;
  // f(c, p, m) for every chunk c = kt·P + p of stage kt inside K and every group m inside N.
  auto for_stage_words = [&](int kt, auto&& f) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int c = kt * P + p;
      if (c >= kchunks) break;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m < mvalid) f(c, p, m);
      }
    }
  };
  auto copy_w = [&](int kt) {
    unsigned char* dst = sw + (kt % STAGES) * C::kWStageBytes;
    for_stage_words(kt, [&](int c, int p, int m) {
      cp_async16(dst + (p * MT + m) * kChunkCodeBytes, wc + (static_cast<int64_t>(m) * kchunks + c) * kChunkCodeBytes);
    });
  };

  // Activation rows of this tile, 16-byte chunks; rows past the expert's are not loaded (their columns
  // of C are never stored).
  const int8_t* xg = a.x + static_cast<int64_t>(r0) * a.ldx;
  auto load_x = [&](int kt) {
    const int k0 = kt * C::BK;
    int8_t* dst = sx + (kt % STAGES) * BT * LDS;
#pragma unroll
    for (int i0 = 0; i0 < C::kXChunks; i0 += C::kThreads) {
      const int i = i0 + tid, r = i / (C::BK / 16), col = i % (C::BK / 16) * 16;
      if ((C::kXChunks % C::kThreads == 0 || i < C::kXChunks) && r < rows && k0 + col < a.k) {
        cp_async16(dst + r * LDS + col, xg + static_cast<int64_t>(r) * a.ldx + k0 + col);
      }
    }
  };
  // One commit group per stage: its activations and its codes.
  auto load_stage = [&](int kt) {
    load_x(kt);
    copy_w(kt);
  };

  // Decode tiles (NT == 2) split the two k32 steps over two accumulator sets: independent mma chains.
  constexpr int AS = NT == 2 ? 2 : 1;
  int32_t acc[AS][MT][NT][4];
  float facc[MT][NT][4];  // grouped only: Σ over closed groups of float(sum)·scale
#pragma unroll
  for (int i = 0; i < AS * MT * NT * 4; ++i) (&acc[0][0][0][0])[i] = 0;
#pragma unroll
  for (int i = 0; i < MT * NT * 4; ++i) (&facc[0][0][0])[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_stage(s);
    cp_commit();
  }

  for (int kt = 0; kt < ktiles; ++kt) {
    if constexpr (kGrouped) {  // the stage's scales, in flight over the wait and its first mmas
      for_stage_words(kt, load_scale);
    }
    cp_wait<STAGES - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt − 1 is free for reuse
    if (kt + STAGES - 1 < ktiles) load_stage(kt + STAGES - 1);
    cp_commit();
    const bf16* xs = reinterpret_cast<const bf16*>(sx + (kt % STAGES) * BT * LDS);  // ldmatrix in b16 units
    const unsigned char* wk = sw + (kt % STAGES) * C::kWStageBytes;                 // the lane's codes
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int c = kt * P + p;
      if (c >= kchunks) break;
      uint4 w[MT];
      float2 sc[MT];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        w[m] = *reinterpret_cast<const uint4*>(wk + (p * MT + m) * kChunkCodeBytes);
        sc[m] = sbuf[p][m];
      }
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        uint32_t af[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const uint32_t w0 = s == 0 ? w[m].x : w[m].z, w1 = s == 0 ? w[m].y : w[m].w;
          af[m][0] = operand_low(w0);
          af[m][1] = operand_high(w0);
          af[m][2] = operand_low(w1);
          af[m][3] = operand_high(w1);
        }
        // Token fragments in pairs; past the expert's rows they hold stale or undefined shared memory,
        // whose columns of C are never stored. Decode tiles (one pair) run without a branch.
#pragma unroll
        for (int jp = 0; jp < NT / 2; ++jp) {
          if (NT > 2 && 2 * jp >= nv) break;
          uint32_t b[4];
          load_b_nk_ldsm(b, xs, LDS / 2, jp * 16, (p * kChunk + s * 32) / 2, lane);
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            mma_s8(acc[s % AS][m][2 * jp], af[m], b[0], b[1]);
            mma_s8(acc[s % AS][m][2 * jp + 1], af[m], b[2], b[3]);
          }
        }
      }
      if (kGrouped && (c + 1) % cpg == 0) {  // close the scale group: c0, c1 are row g, c2, c3 row g+8
#pragma unroll
        for (int m = 0; m < MT; ++m) {
#pragma unroll
          for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int32_t v = AS == 2 ? acc[0][m][j][i] + acc[AS - 1][m][j][i] : acc[0][m][j][i];
              facc[m][j][i] = __fmaf_rn(__int2float_rn(v), i < 2 ? sc[m].x : sc[m].y, facc[m][j][i]);
#pragma unroll
              for (int h = 0; h < AS; ++h) acc[h][m][j][i] = 0;
            }
          }
        }
      }
    }
  }
  cp_wait<0>();

  // c0, c1 = feature g, tokens 2t, 2t+1; c2, c3 = feature g+8. Lanes g and g^1 swap halves so that
  // even g holds token 2t of features (g, g+1) and odd g token 2t+1 of features (g−1, g). Feature
  // factors before the swap, token factors after.
  const int g = lane >> 2, t = lane & 3;
  const bool odd = g & 1;
  const int tok = 2 * t + (odd ? 1 : 0), fcol = g & ~1;
  Tout* yt = static_cast<Tout*>(a.y) + static_cast<int64_t>(r0) * a.ldy;
  constexpr float kInv16 = 1.0f / (1 << kCodeShift);
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m >= mvalid) continue;
    const int f = f_warp + m * 16;
    const float osc = a.out_scale[expert * a.parts + f / a.part_rows];
    float2 chan = make_float2(1.0f, 1.0f);  // per channel: the one scale group
    if (!kGrouped) chan = __ldg(reinterpret_cast<const float2*>(ws + static_cast<int64_t>(m) * kRowGroup));
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      if (j >= nv) break;
      float c[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (kGrouped) {
          c[i] = facc[m][j][i] * kInv16;
        } else {
          const int32_t v = AS == 2 ? acc[0][m][j][i] + acc[AS - 1][m][j][i] : acc[0][m][j][i];
          c[i] = __fmul_rn(__int2float_rn(v), i < 2 ? chan.x : chan.y) * kInv16;
        }
      }
      const float r0v = __shfl_xor_sync(0xFFFFFFFFu, odd ? c[0] : c[1], 4);
      const float r1v = __shfl_xor_sync(0xFFFFFFFFu, odd ? c[2] : c[3], 4);
      const int row = 8 * j + tok;
      if (row >= rows) continue;
      const float xsc = a.xscale[r0 + row];
      const float rw = a.row_weight != nullptr ? a.row_weight[r0 + row] : 1.0f;
      auto y = [&](float v) { return __fmul_rn(__fmul_rn(__fmul_rn(v, xsc), osc), rw); };
      Tout* yr = yt + static_cast<int64_t>(row) * a.ldy + f + fcol;
      if (odd) {
        store_pair(yr, y(r0v), y(c[1]));
        store_pair(yr + 8, y(r1v), y(c[3]));
      } else {
        store_pair(yr, y(c[0]), y(r0v));
        store_pair(yr + 8, y(c[2]), y(r1v));
      }
    }
  }
}

template <class C, bool kGrouped, typename Tout>
void launch_cfg(const GemmArgs& a, const MoeTileMap& map, cudaStream_t stream) {
  const int n_tiles = (a.n + C::BF - 1) / C::BF;
  const int64_t blocks = static_cast<int64_t>(n_tiles) * map.bound;
  if (blocks > INT32_MAX) throw Error("moe_grouped_gemm_w4a8: grid too large");
  allow_dynamic_smem(moe_w4a8_kernel<C, kGrouped, Tout>, C::kSmemBytes);
  moe_w4a8_kernel<C, kGrouped, Tout><<<static_cast<unsigned>(blocks), C::kThreads, C::kSmemBytes, stream>>>(
      a, n_tiles, map.count, reinterpret_cast<const int4*>(map.tiles));
  K3_CUDA_CHECK_LAUNCH("moe_w4a8_kernel");
}

template <class C>
void launch_variant(bool f32_out, bool grouped, const GemmArgs& a, const MoeTileMap& map, cudaStream_t stream) {
  if (grouped) {
    f32_out ? launch_cfg<C, true, float>(a, map, stream) : launch_cfg<C, true, bf16>(a, map, stream);
  } else {
    f32_out ? launch_cfg<C, false, float>(a, map, stream) : launch_cfg<C, false, bf16>(a, map, stream);
  }
}

// kM16: 6 chunks (384 columns) of codes per warp and stage, 3 stages; kM64: 2 chunks of two groups, 5
// stages. Codes per stage 24 KB and 8 KB, shared memory 91 KB and 85 KB per CTA, two CTAs per SM
// (measured against a register prefetch: docs/decisions/w4a8-tile-choice.md).
using CfgDecode = Cfg<16, 1, 8, 6, 3, 2>;
using CfgPrefill64 = Cfg<64, 2, 4, 2, 5, 2>;

}  // namespace

void launch_gemm(MoeTile tile, bool f32_out, bool grouped, const GemmArgs& a, const MoeTileMap& map,
                 cudaStream_t stream) {
  switch (tile) {
    case MoeTile::kM16: launch_variant<CfgDecode>(f32_out, grouped, a, map, stream); break;
    case MoeTile::kM64: launch_variant<CfgPrefill64>(f32_out, grouped, a, map, stream); break;
    case MoeTile::kM128:  // slower than kM64 at every size (docs/decisions/w4a8-tile-choice.md)
    case MoeTile::kAuto: throw Error("moe_grouped_gemm_w4a8: no kernel for this tile");
  }
}

}  // namespace k3::cuda::w4a8
