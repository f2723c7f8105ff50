// The grouped GEMM over a MoE dispatch on mma.sync (moe.h), as a template over where its weight
// tiles come from: a bf16 bank (moe_grouped_gemm.cu: moe_grouped_gemm_bf16) or a format's bank of
// quantized blocks decoded to bf16 on the way into shared memory (a format folder's cuda/ prefill
// GEMM). ys[r] = xs[r]·W_eᵀ for the sorted rows r of each expert e. One CTA computes a BM × BN tile
// of one expert. The grid is n-tiles × the tile map's upper bound; CTA L with L / n-tiles past the
// dispatch's tile count exits. The others cover, expert by expert, that expert's m-tiles × n-tiles
// with the m-tile fastest: the CTAs that read one weight slice run back to back (it comes from DRAM
// once even when an expert has several m-tiles), and the expert's activation rows stay in L2 while
// its n-tiles go by.
//
// Main loop: a STAGES-deep ring in padded shared rows (BK + 8 elements: conflict-free ldmatrix), one
// barrier per stage; activations by cp.async; weights by cp.async too (WeightSource::kAsync) or
// decoded by the threads themselves after the first k16 step's MMAs are issued (so the decode's loads
// overlap them), the stage after it prefetched into L1 at the same time. ldmatrix fragments
// double-buffered across the k16 steps (the next step's load under this step's mma.sync m16n8k16,
// bf16 in, fp32 accumulators). Rows past the expert's last row,
// columns past N and keys past K are zero-filled; a warp's m16 fragments wholly past the expert's
// rows are neither loaded nor multiplied, so a partly filled tall tile costs about what its rows
// need. The epilogue stores only real rows and columns.
//
// Three tile shapes (moe_tile_for picks one from T·k/E on the host; H200 figures in bench_cuda):
//   kM16   16 × 64, 4 warps of 16 × 16, BK 64, 6 stages, 3 CTAs/SM: decode, an expert sees a few
//          rows; each CTA streams a 64-row slice of one expert's weights once, ~120 KB in flight/SM.
//   kM64   64 × 128, 4 warps of 32 × 64, BK 64, 3 stages: tens of rows per expert.
//   kM128  128 × 128, 4 warps of 64 × 64, BK 64, 3 stages: prefill.
// Only included from .cu files.
#pragma once

#include <string>

#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/attention/mla/mla_util.cuh"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/moe/moe_tiles.h"
#include "backend/cuda/moe/moe_tile.cuh"

namespace k3::cuda::grouped_gemm {

using namespace mla_detail;  // cp.async, ldmatrix and mma.sync helpers

template <int BM_, int BN_, int BK_, int WARPS_M, int WARPS_N, int STAGES_, int MIN_BLOCKS>
struct TileCfg {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_, kMinBlocks = MIN_BLOCKS;
  static constexpr int kWarpsN = WARPS_N, kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // one warp's tile
  static constexpr int MT = WTM / 16, NT = WTN / 8;             // its m16 and n8 fragments
  static constexpr int KK = BK / 16;                             // k16 steps per stage
  static constexpr int LDS = BK + 8;                             // padded shared row (elements)
  static constexpr int kChunks = BK / 8, kRowStep = kThreads / kChunks;  // 16 B chunks, rows per pass
  static constexpr int kSmemBytes = STAGES * (BM + BN) * LDS * 2;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && KK % 2 == 0, "fragment shapes; fragments double-buffered by kk parity");
  static_assert(kThreads % kChunks == 0 && BM % kRowStep == 0 && BN % kRowStep == 0, "whole passes");
  static_assert(BM / kRowStep <= 32 && BN / kRowStep <= 32, "row masks");
};
using CfgM16 = TileCfg<16, 64, 64, 1, 4, 6, 3>;
using CfgM64 = TileCfg<64, 128, 64, 2, 2, 3, 2>;
using CfgM128 = TileCfg<128, 128, 64, 2, 2, 3, 2>;

// Weight source: a stacked bf16 bank [E·N, ldw]; its tiles come by cp.async with the activations'.
struct Bf16Bank {
  static constexpr bool kAsync = true;
  const bf16* w;
  int64_t ldw;

  // Bank row `row` (and the rows kRowStep, 2·kRowStep, … after it where `rows` has their bit), 8
  // columns from `col`, into dst by cp.async; zeros where !in_k or a row is missing.
  template <class C>
  __device__ __forceinline__ void load(bf16* dst, int64_t row, int col, bool in_k, uint32_t rows) const {
    const bf16* src = w + row * ldw + col;
#pragma unroll
    for (int i = 0; i < C::BN / C::kRowStep; ++i) {
      const bool ok = in_k && (rows >> i & 1u);
      cp_async16(dst + i * C::kRowStep * C::LDS, ok ? src + i * C::kRowStep * ldw : w, ok ? 16 : 0);
    }
  }
};

template <class W>
struct GemmArgs {
  const bf16* x;
  int64_t ldx;
  W w;
  void* y;
  int64_t ldy;
  int n, k, n_tiles;
  const int32_t* offsets;
  const int32_t* tile_count;
  const int4* tiles;
  const float* row_weight;  // [R] or null: each sorted row's output scaled by it (MoeDispatch::row_weight)
};

__device__ __forceinline__ void store2(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
__device__ __forceinline__ void store2(bf16* p, float a, float b) { *reinterpret_cast<uint32_t*>(p) = pack_bf16(a, b); }

template <class C, typename Tout, class W>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) moe_gemm_kernel(GemmArgs<W> a) {
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, LDS = C::LDS, STAGES = C::STAGES, KK = C::KK;
  constexpr int MT = C::MT, NP = C::NT / 2;  // NP: ldmatrix.x4 loads of B (two n8 fragments each)
  detail::MoeCtaTile ct;
  if (!detail::moe_cta_tile(a.n_tiles, BM, BN, a.tile_count, a.tiles, a.offsets, ct)) return;
  const int expert = ct.expert, r0 = ct.row0, rows = ct.rows, n0 = ct.col0;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* sa = reinterpret_cast<bf16*>(smem_raw);  // [STAGES][BM][LDS]
  bf16* sb = sa + STAGES * BM * LDS;             // [STAGES][BN][LDS]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wrow = warp / C::kWarpsN * C::WTM, wcol = warp % C::kWarpsN * C::WTN;
  // The warp's m16 fragments that hold rows of this expert; the others are neither loaded nor multiplied.
  const int mvalid = max(0, min(MT, (rows - wrow + 15) / 16));
  const int ktiles = (a.k + BK - 1) / BK;

  // Each thread fills the 16-byte chunk lcol of rows lrow + i·kRowStep of both operands per stage.
  const int lrow = tid / C::kChunks, lcol = tid % C::kChunks * 8;
  const bf16* xsrc = a.x + (static_cast<int64_t>(r0) + lrow) * a.ldx + lcol;
  const int64_t wrow0 = static_cast<int64_t>(expert) * a.n + n0 + lrow;
  uint32_t xrows = 0, wrows = 0;  // bit i: row lrow + i·kRowStep exists
#pragma unroll
  for (int i = 0; i < BM / C::kRowStep; ++i) xrows |= (lrow + i * C::kRowStep < rows ? 1u : 0u) << i;
#pragma unroll
  for (int i = 0; i < BN / C::kRowStep; ++i) wrows |= (n0 + lrow + i * C::kRowStep < a.n ? 1u : 0u) << i;
  auto load_x = [&](int kt) {
    const int k0 = kt * BK;
    const bool kin = k0 + lcol < a.k;
    bf16* da = sa + (kt % STAGES) * BM * LDS + lrow * LDS + lcol;
#pragma unroll
    for (int i = 0; i < BM / C::kRowStep; ++i) {
      const bool ok = kin && (xrows >> i & 1u);
      cp_async16(da + i * C::kRowStep * LDS, ok ? xsrc + i * C::kRowStep * a.ldx + k0 : a.x, ok ? 16 : 0);
    }
  };
  auto load_w = [&](int kt) {
    const int k0 = kt * BK;
    a.w.template load<C>(sb + (kt % STAGES) * BN * LDS + lrow * LDS + lcol, wrow0, k0 + lcol, k0 + lcol < a.k, wrows);
  };
  auto prefetch_w = [&](int kt) {  // decoding sources: the stage after the one load_w decodes
    const int k0 = kt * BK;
    if constexpr (!W::kAsync) a.w.template prefetch<C>(wrow0, k0 + lcol, k0 + lcol < a.k, wrows);
  };

  // Fragments double-buffered by kk parity: step kk's are multiplied while step kk + 1's load.
  uint32_t af[2][MT][4], bfr[2][NP][4];
  auto load_frags = [&](int buf, int kt, int kk) {
    const bf16* ta = sa + (kt % STAGES) * BM * LDS;
    const bf16* tb = sb + (kt % STAGES) * BN * LDS;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m < mvalid) load_a_ldsm(af[buf][m], ta, LDS, wrow + m * 16, kk * 16, lane);
    }
#pragma unroll
    for (int p = 0; p < NP; ++p) load_b_nk_ldsm(bfr[buf][p], tb, LDS, wcol + p * 16, kk * 16, lane);
  };
  float acc[MT][C::NT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int n = 0; n < C::NT; ++n) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
  }

  prefetch_w(STAGES - 1);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_x(s), load_w(s);
    cp_commit();
  }
  cp_wait<STAGES - 2>();
  __syncthreads();
  if (mvalid > 0) load_frags(0, 0, 0);
  for (int kt = 0; kt < ktiles; ++kt) {
    const bool refill = kt + STAGES - 1 < ktiles;  // stage kt − 1's slot, free since the last barrier
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
      if (kk == KK - 1) {
        // Stage kt + 1 must have landed (for every thread) before its first fragments load; past
        // this barrier every warp is done reading stage kt − 1, which the kk == 0 step refills.
        cp_wait<STAGES - 2>();
        __syncthreads();
      }
      const int nkt = kk == KK - 1 ? kt + 1 : kt;
      if (mvalid > 0 && nkt < ktiles) load_frags((kk + 1) & 1, nkt, (kk + 1) % KK);
      if (kk == 0) {
        if (refill) {
          load_x(kt + STAGES - 1);
          if constexpr (W::kAsync) load_w(kt + STAGES - 1);
        }
        cp_commit();
      }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m >= mvalid) continue;
#pragma unroll
        for (int p = 0; p < NP; ++p) {
          mma_bf16(acc[m][2 * p], af[kk & 1][m], bfr[kk & 1][p][0], bfr[kk & 1][p][1]);
          mma_bf16(acc[m][2 * p + 1], af[kk & 1][m], bfr[kk & 1][p][2], bfr[kk & 1][p][3]);
        }
      }
      // A decoding source fills its slot with plain stores, seen by every warp after the next
      // barrier (the stage is read two barriers on).
      if constexpr (!W::kAsync) {
        if (kk == 0 && refill) {
          if (kt + STAGES < ktiles) prefetch_w(kt + STAGES);
          load_w(kt + STAGES - 1);
        }
      }
    }
  }
  cp_wait<0>();

  // Fragment layout: c0, c1 = row g, columns 2t, 2t+1 of the n8 tile; c2, c3 = row g + 8.
  Tout* yt = static_cast<Tout*>(a.y) + static_cast<int64_t>(r0) * a.ldy;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    const int row = wrow + m * 16 + g;
    const float w0 = a.row_weight != nullptr && row < rows ? a.row_weight[r0 + row] : 1.0f;
    const float w1 = a.row_weight != nullptr && row + 8 < rows ? a.row_weight[r0 + row + 8] : 1.0f;
#pragma unroll
    for (int n = 0; n < C::NT; ++n) {
      const int col = n0 + wcol + n * 8 + 2 * t;
      if (col >= a.n) continue;  // N % 8 == 0: an n8 tile is wholly in or out
      if (row < rows) store2(yt + static_cast<int64_t>(row) * a.ldy + col, acc[m][n][0] * w0, acc[m][n][1] * w0);
      if (row + 8 < rows) store2(yt + static_cast<int64_t>(row + 8) * a.ldy + col, acc[m][n][2] * w1, acc[m][n][3] * w1);
    }
  }
}

template <class C, typename Tout, class W>
void launch(GemmArgs<W> a, const MoeTileMap& map, cudaStream_t stream, const char* what) {
  a.n_tiles = (a.n + C::BN - 1) / C::BN;
  a.tile_count = map.count;
  a.tiles = reinterpret_cast<const int4*>(map.tiles);
  const int64_t blocks = static_cast<int64_t>(a.n_tiles) * map.bound;
  if (blocks > INT32_MAX) throw Error(std::string(what) + ": grid too large");
  allow_dynamic_smem(moe_gemm_kernel<C, Tout, W>, C::kSmemBytes);
  moe_gemm_kernel<C, Tout, W><<<static_cast<unsigned>(blocks), C::kThreads, C::kSmemBytes, stream>>>(a);
  K3_CUDA_CHECK_LAUNCH("moe_gemm_kernel");
}

// The launch at tile class `tile` (kM16, kM64 or kM128) into ys (f32 or bf16; a.y is its data).
template <class W>
void launch_tile(MoeTile tile, const GemmArgs<W>& a, const MoeTileMap& map, const DeviceTensor& ys, cudaStream_t stream,
                 const char* what) {
  auto run = [&](auto zero) {
    using Tout = decltype(zero);
    switch (tile) {
      case MoeTile::kM16: launch<CfgM16, Tout>(a, map, stream, what); break;
      case MoeTile::kM64: launch<CfgM64, Tout>(a, map, stream, what); break;
      case MoeTile::kM128: launch<CfgM128, Tout>(a, map, stream, what); break;
      case MoeTile::kAuto: throw Error(std::string(what) + ": unresolved tile");
    }
  };
  if (ys.dtype == DType::kF32) {
    run(float{});
  } else if (ys.dtype == DType::kBF16) {
    run(bf16{});
  } else {
    throw Error(std::string(what) + ": ys must be f32 or bf16, got " + ys.describe());
  }
}

}  // namespace k3::cuda::grouped_gemm
