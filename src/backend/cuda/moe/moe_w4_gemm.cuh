// The 4-bit expert grouped GEMM kernel (moe_w4.h), one template over the format trait and the tile
// configuration; moe_w4_nvfp4.cu and moe_w4_mxfp4.cu instantiate it. Included by those two and by
// moe_w4_decode.cuh (the decode kernel reuses Trait, ScaleRegs and dequant).
//
// Swapped operands: C[feature][token] = Σ_k W[feature][k] · x[token][k] with the dequantised weights
// as the mma A operand (m16 = 16 weight rows, straight from the bank's fragment-ordered words in
// registers) and the expert's sorted activation rows as B (n8 = 8 tokens, ldmatrix from a cp.async
// ring in shared memory). A CTA owns one tile of the dispatch's tile map (≤ BT rows of one expert)
// and BF = 16·MT·warps weight rows; the warps split the weight rows and share the tokens, and pairs of
// n8 fragments wholly past the expert's rows are neither loaded nor multiplied (prefill tiles).
//
// Weights bypass shared memory: every lane loads its 16-byte word group per 16-row group and 64-column
// chunk (one coalesced 512-byte request per warp) P chunks ahead into registers, with the chunk's
// block scales (one 4- or 8-byte load). Per k16 step and 16-row group a lane turns one 32-bit word into
// its four A registers: one shift/mask per register (moe_w4_layout.h) and one bf16x2 multiply by
// F = scale·2^119 (the scale byte spread to both halves by one byte permute and turned into F by one
// multiply-add). Epilogue: fp32 accumulator × 2^7 · out_scale[expert, part], transposed in pairs with
// one shuffle so each lane stores two adjacent features of one token.
//
// CTA → tile order as in moe_grouped_gemm.cu: an expert's token tiles run back to back for each
// feature tile, so a weight slice comes from DRAM once while the expert's tiles go by.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/attention/mla/mla_util.cuh"
#include "backend/cuda/moe/moe_w4_internal.h"
#include "backend/cuda/moe/moe_w4_layout.h"
#include "backend/cuda/moe/moe_tile.cuh"

namespace k3::cuda::w4 {

using namespace mla_detail;  // cp.async, ldmatrix, mma.sync helpers

template <W4Format F>
struct Trait {
  static constexpr FormatBits kBits = F == W4Format::kNvfp4 ? kNvfp4Bits : kMxfp4Bits;
  static constexpr int kBlocks = blocks_per_chunk(kBits);           // block scales per chunk and row
  static constexpr int kScaleWords = scale_bytes_per_lane(kBits) / 4;  // 2 (NVFP4) or 1 (MXFP4)
  static constexpr int kStepsPerBlock = 4 / kBlocks;
  static constexpr uint32_t kMul = kBits.scale_mul, kAdd = kBits.scale_add;
};

// BT tokens per CTA (the tile map's height), MT 16-row weight groups per warp, P 64-column chunks per
// pipeline stage (and the weight prefetch distance), STAGES activation stages.
template <int BT_, int MT_, int WARPS, int P_, int STAGES_, int MIN_BLOCKS>
struct Cfg {
  static constexpr int BT = BT_, MT = MT_, P = P_, STAGES = STAGES_, kMinBlocks = MIN_BLOCKS;
  static constexpr int kWarps = WARPS, kThreads = WARPS * 32;
  static constexpr int BF = 16 * MT * WARPS;  // weight rows (output features) per CTA
  static constexpr int BK = P * kChunk;       // columns per stage
  static constexpr int LDS = BK + 8;          // padded shared row: conflict-free ldmatrix
  static constexpr int NT = BT / 8;           // n8 token fragments
  static constexpr int kSmemBytes = STAGES * BT * LDS * 2;
  static constexpr int kXChunks = BT * BK / 8;  // 16-byte activation chunks per stage
  static_assert(NT % 2 == 0, "tokens in ldmatrix.x4 pairs of n8 fragments");
};

template <int N>
struct ScaleRegs {
  uint32_t w[N];
};
template <int N>
__device__ __forceinline__ ScaleRegs<N> ld_scales(const uint8_t* p) {
  ScaleRegs<N> s;
  if constexpr (N == 2) {
    asm volatile("ld.global.nc.v2.u32 {%0,%1}, [%2];\n" : "=r"(s.w[0]), "=r"(s.w[1]) : "l"(p));
  } else {
    asm volatile("ld.global.nc.u32 %0, [%1];\n" : "=r"(s.w[0]) : "l"(p));
  }
  return s;
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// The A fragment of k16 step S from one word: registers a0..a3 = rows (g, g+8, g, g+8).
template <W4Format F, int S>
__device__ __forceinline__ void dequant(uint32_t (&a)[4], uint32_t word, const ScaleRegs<Trait<F>::kScaleWords>& sc) {
  using T = Trait<F>;
  constexpr int kByte = 2 * (S / T::kStepsPerBlock);  // row g's scale byte of this step's block
  const uint32_t sw = sc.w[kByte / 4];
  constexpr int b = kByte % 4;
  const uint32_t fg = scale_f_pair(T::kMul, T::kAdd, __byte_perm(sw, 0u, b | 0x4000 | (b << 8) | 0x40));
  const uint32_t fg8 = scale_f_pair(T::kMul, T::kAdd, __byte_perm(sw, 0u, (b + 1) | 0x4000 | ((b + 1) << 8) | 0x40));
  a[0] = bf16x2_mul(unpack_slot(word, 0), fg);
  a[1] = bf16x2_mul(unpack_slot(word, 1), fg8);
  a[2] = bf16x2_mul(unpack_slot(word, 2), fg);
  a[3] = bf16x2_mul(unpack_slot(word, 3), fg8);
}

__device__ __forceinline__ void store_pair(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
__device__ __forceinline__ void store_pair(bf16* p, float a, float b) { *reinterpret_cast<uint32_t*>(p) = pack_bf16(a, b); }

// Half an m16n8 accumulator fragment (8 features × 8 tokens) times `scale` (and token i's
// row_weight[i] when row_weight is set): v0, v1 = feature g, tokens 2t, 2t + 1 (g = lane / 4,
// t = lane % 4). Lanes g and g ^ 1 swap one value with one shuffle, so that even g stores token 2t of
// features (g, g + 1) and odd g token 2t + 1 of features (g − 1, g). y: feature 0 of token 0; tokens
// from `rows` on are not stored. Every lane of the warp takes part.
template <typename Tout>
__device__ __forceinline__ void store_rows8(Tout* y, int64_t ldy, int rows, float v0, float v1, float scale,
                                            const float* row_weight, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const bool odd = g & 1;
  const float other = __shfl_xor_sync(0xFFFFFFFFu, odd ? v0 : v1, 4);
  const int tok = 2 * t + (odd ? 1 : 0);
  if (tok >= rows) return;
  if (row_weight != nullptr) scale *= row_weight[tok];
  Tout* yr = y + static_cast<int64_t>(tok) * ldy + (g & ~1);
  if (odd) {
    store_pair(yr, other * scale, v1 * scale);
  } else {
    store_pair(yr, v0 * scale, other * scale);
  }
}

// A whole fragment (16 features × 8 tokens): c0, c1 = feature g, c2, c3 = feature g + 8.
template <typename Tout>
__device__ __forceinline__ void store_fragment(Tout* y, int64_t ldy, int rows, const float* c, float scale,
                                               const float* row_weight, int lane) {
  store_rows8(y, ldy, rows, c[0], c[1], scale, row_weight, lane);
  store_rows8(y + 8, ldy, rows, c[2], c[3], scale, row_weight, lane);
}

// The row weights from sorted row r on (null when the dispatch has none).
__device__ __forceinline__ const float* row_weights_from(const float* row_weight, int64_t r) {
  return row_weight != nullptr ? row_weight + r : nullptr;
}

template <W4Format F, class C, typename Tout>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    moe_w4_kernel(GemmArgs a, int n_tiles, const int32_t* __restrict__ tile_count, const int4* __restrict__ tiles) {
  using T = Trait<F>;
  constexpr int BT = C::BT, MT = C::MT, P = C::P, STAGES = C::STAGES, LDS = C::LDS, NT = C::NT;
  constexpr int kSB = scale_bytes_per_chunk(T::kBits);
  detail::MoeCtaTile ct;
  if (!detail::moe_cta_tile(n_tiles, BT, C::BF, tile_count, tiles, a.offsets, ct)) return;
  const int expert = ct.expert, r0 = ct.row0, rows = ct.rows, n0 = ct.col0;
  const int nv = (rows + 7) / 8;  // n8 fragments holding rows of this expert

  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* sx = reinterpret_cast<bf16*>(smem_raw);  // [STAGES][BT][LDS]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int f_warp = n0 + warp * MT * 16;                   // the warp's first weight row within the expert
  const int mvalid = max(0, min(MT, (a.n - f_warp) / 16));  // its 16-row groups inside N
  const int kchunks = a.k / kChunk;
  const int ktiles = (kchunks + P - 1) / P;

  // Group m of the warp, chunk c: codes at wc + (m·kchunks + c)·512, scales at ws + (m·kchunks + c)·kSB.
  const int64_t group0 = (static_cast<int64_t>(expert) * a.n + f_warp) / kRowGroup;
  const uint8_t* wc = a.codes + group0 * kchunks * kChunkCodeBytes + lane * 16;
  const uint8_t* ws = a.scales + group0 * kchunks * kSB + (lane >> 2) * scale_bytes_per_lane(T::kBits);
  // Groups past N are neither loaded nor stored; their (zero) registers are multiplied anyway, which
  // keeps the chunk's code free of branches.
  uint4 wbuf[P][MT] = {};
  ScaleRegs<T::kScaleWords> sbuf[P][MT] = {};
  auto load_w = [&](int c, int p) {
    if (c >= kchunks) return;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m < mvalid) {
        wbuf[p][m] = detail::load_streaming16(wc + (static_cast<int64_t>(m) * kchunks + c) * kChunkCodeBytes);
        sbuf[p][m] = ld_scales<T::kScaleWords>(ws + (static_cast<int64_t>(m) * kchunks + c) * kSB);
      }
    }
  };

  // Activation rows of this tile, 16-byte chunks; rows past the expert's are not loaded (their
  // columns of C are never stored).
  const bf16* xg = static_cast<const bf16*>(a.x) + static_cast<int64_t>(r0) * a.ldx;
  auto load_x = [&](int kt) {
    const int k0 = kt * C::BK;
    bf16* dst = sx + (kt % STAGES) * BT * LDS;
#pragma unroll
    for (int i0 = 0; i0 < C::kXChunks; i0 += C::kThreads) {
      const int i = i0 + tid, r = i / (C::BK / 8), col = i % (C::BK / 8) * 8;
      if ((C::kXChunks % C::kThreads == 0 || i < C::kXChunks) && r < rows && k0 + col < a.k) {
        cp_async16(dst + r * LDS + col, xg + static_cast<int64_t>(r) * a.ldx + k0 + col);
      }
    }
  };

  // Decode tiles (NT == 2) split the k16 steps over two accumulator sets: twice the independent mma
  // chains per warp.
  constexpr int AS = NT == 2 ? 2 : 1;
  float acc[AS][MT][NT][4];
#pragma unroll
  for (int i = 0; i < AS * MT * NT * 4; ++i) (&acc[0][0][0][0])[i] = 0.0f;

#pragma unroll
  for (int p = 0; p < P; ++p) load_w(p, p);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_x(s);
    cp_commit();
  }

  for (int kt = 0; kt < ktiles; ++kt) {
    cp_wait<STAGES - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt − 1 is free for reuse
    if (kt + STAGES - 1 < ktiles) load_x(kt + STAGES - 1);
    cp_commit();
    const bf16* xs = sx + (kt % STAGES) * BT * LDS;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int c = kt * P + p;
      if (c >= kchunks) break;
      uint4 w[MT];
      ScaleRegs<T::kScaleWords> sc[MT];
#pragma unroll
      for (int m = 0; m < MT; ++m) w[m] = wbuf[p][m], sc[m] = sbuf[p][m];
      load_w(c + P, p);
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        uint32_t af[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const uint32_t word = s == 0 ? w[m].x : s == 1 ? w[m].y : s == 2 ? w[m].z : w[m].w;
          switch (s) {
            case 0: dequant<F, 0>(af[m], word, sc[m]); break;
            case 1: dequant<F, 1>(af[m], word, sc[m]); break;
            case 2: dequant<F, 2>(af[m], word, sc[m]); break;
            default: dequant<F, 3>(af[m], word, sc[m]); break;
          }
        }
        // Token fragments in pairs; past the expert's rows they hold stale or undefined shared memory,
        // whose columns of C are never stored. Decode tiles (one pair) run without a branch.
#pragma unroll
        for (int jp = 0; jp < NT / 2; ++jp) {
          if (NT > 2 && 2 * jp >= nv) break;
          uint32_t b[4];
          load_b_nk_ldsm(b, xs, LDS, jp * 16, p * kChunk + s * 16, lane);
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            mma_bf16(acc[s % AS][m][2 * jp], af[m], b[0], b[1]);
            mma_bf16(acc[s % AS][m][2 * jp + 1], af[m], b[2], b[3]);
          }
        }
      }
    }
  }
  cp_wait<0>();

  Tout* yt = static_cast<Tout*>(a.y) + static_cast<int64_t>(r0) * a.ldy;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m >= mvalid) continue;
    const int f = f_warp + m * 16;
    const float sc = static_cast<float>(1 << kOffsetLog2) * a.out_scale[expert * a.parts + f / a.part_rows];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      if (j >= nv) break;
      float c[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) c[i] = AS == 2 ? acc[0][m][j][i] + acc[AS - 1][m][j][i] : acc[0][m][j][i];
      store_fragment(yt + static_cast<int64_t>(8 * j) * a.ldy + f, a.ldy, rows - 8 * j, c, sc,
                     row_weights_from(a.row_weight, r0 + 8 * j), lane);
    }
  }
}

template <W4Format F, class C, typename Tout>
void launch_cfg(const GemmArgs& a, const MoeTileMap& map, cudaStream_t stream) {
  const int n_tiles = (a.n + C::BF - 1) / C::BF;
  const int64_t blocks = static_cast<int64_t>(n_tiles) * map.bound;
  if (blocks > INT32_MAX) throw Error("moe_grouped_gemm_w4: grid too large");
  allow_dynamic_smem(moe_w4_kernel<F, C, Tout>, C::kSmemBytes);
  moe_w4_kernel<F, C, Tout><<<static_cast<unsigned>(blocks), C::kThreads, C::kSmemBytes, stream>>>(
      a, n_tiles, map.count, reinterpret_cast<const int4*>(map.tiles));
  K3_CUDA_CHECK_LAUNCH("moe_w4_kernel");
}

// kM16: decode class, 6 chunks (384 columns) ahead: 3 KB of codes in flight per warp, 16 warps per SM.
using CfgDecode = Cfg<16, 1, 8, 6, 3, 2>;
using CfgPrefill64 = Cfg<64, 2, 4, 2, 3, 2>;

template <W4Format F, typename Tout>
void launch_tile(MoeTile tile, const GemmArgs& a, const MoeTileMap& map, cudaStream_t stream) {
  switch (tile) {
    case MoeTile::kM16: launch_cfg<F, CfgDecode, Tout>(a, map, stream); break;
    case MoeTile::kM64: launch_cfg<F, CfgPrefill64, Tout>(a, map, stream); break;
    case MoeTile::kM128:  // the warpgroup-MMA kernel's class (moe_w4_wgmma.cuh)
    case MoeTile::kAuto: throw Error("moe_grouped_gemm_w4: no mma.sync kernel for this tile");
  }
}

template <W4Format F>
void launch_gemm(MoeTile tile, bool f32_out, const GemmArgs& a, const MoeTileMap& map, cudaStream_t stream) {
  if (f32_out) {
    launch_tile<F, float>(tile, a, map, stream);
  } else {
    launch_tile<F, bf16>(tile, a, map, stream);
  }
}

}  // namespace k3::cuda::w4
