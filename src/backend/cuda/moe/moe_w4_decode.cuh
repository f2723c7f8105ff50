// The 4-bit expert decode kernel (moe_w4.h, W4Kernel::kDecode): a persistent grid for dispatches whose
// experts see few rows (≤ 16 per kM16 tile), built to keep the HBM read pipe full rather than the
// tensor cores. Included by moe_w4_decode_nvfp4.cu / moe_w4_decode_mxfp4.cu only.
//
// Why a second kernel (the tile kernels of moe_w4_gemm.cuh measured 1.6–2.0 TB/s at decode): they
// prefetch the weight words into registers, P chunks ahead per warp, and ptxas tracks each of those
// loads on one of the warp's six scoreboards — a dozen loads in flight share them, so a warp that
// needs chunk c also waits for later chunks on the same scoreboard and the real prefetch depth is
// ~2 chunks, ~25 KB in flight per SM, not the 55 KB the configuration names (at ~1.5 µs of loaded
// latency 3.83 TB/s needs ~45–60 KB per SM). Besides, every stage of the activation ring is a block
// barrier, and at T = 1 the grid is 1.5–3 waves of large CTAs.
//
// Here:
//   * weights go HBM → shared memory with cp.async (one commit group per stage, one counter-based
//     wait per stage: STAGES − 1 chunk stages genuinely in flight per warp, no scoreboard limit),
//     each warp through its own ring: no block barrier on the weight path; a lane reads back its own
//     16 bytes of codes (the scales, 64 / 32 bytes copied by 4 / 2 lanes, after a __syncwarp);
//   * the expert's ≤ 16 activation rows are loaded into shared memory once per tile (16·K bf16,
//     16-byte units XOR-swizzled by row so ldmatrix is conflict-free) and serve every weight row;
//   * the grid is one CTA of 16 warps per SM; the work — units of (kM16 tile, K split, 64 weight
//     rows), in that order — is split into equal contiguous ranges per CTA from the device-side tile
//     count, so the tail is at most one unit (64 rows × the split's K) per SM and no CTA exits idle;
//     a warp's ring streams on across unit boundaries;
//   * split-K (DecodeSplit, moe_w4_internal.h): split s covers chunks [s·chunks, min(KC, (s+1)·chunks))
//     and only its columns of the activations sit in shared memory (loaded again when the split
//     changes); with one split that is all of K;
//   * within a unit, warp w takes the 16-row groups 2·(w % 2) and 2·(w % 2) + 1 (one ldmatrix of
//     activations feeds both) and K slice w / 2: the split's chunks c ≡ w/2 (mod 8), counted from the
//     split's first chunk, one chunk of both groups per ring stage; the eight slices' partial sums
//     meet in shared memory (fixed order, so the result is deterministic) with two block barriers per
//     unit (per 8 tokens);
//   * one n8 token fragment when the tile has ≤ 8 rows, two otherwise (one ldmatrix.x4 per two k16
//     steps, or per step).
// Dequantisation and the scale contract are the tile kernels' (moe_w4_gemm.cuh): block scales inside
// the bf16x2 multiply, 2^7 · out_scale[expert, part] (and row_weight) once on the fp32 sum — here with
// one split, else in launch_split_sum on the sum of the splits' raw partial sums.
#pragma once

#include <algorithm>
#include <string>

#include "backend/cuda/core/device.h"
#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/launch.h"
#include "backend/cuda/moe/moe_w4_gemm.cuh"

namespace k3::cuda::w4 {

template <W4Format F, int STAGES>
struct DecodeCfg {
  static constexpr int kStages = STAGES;
  static constexpr int kSlices = kDecodeSlices;  // K slices per unit
  static constexpr int kWarps = 2 * kSlices;     // × 2 pairs of 16-row groups = 64 weight rows per unit
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kSB = scale_bytes_per_chunk(Trait<F>::kBits);
  static constexpr int kStageBytes = 2 * (kChunkCodeBytes + kSB);  // 1152 (NVFP4) / 1088 (MXFP4)
};

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const bf16* p) { ldsm_x4(r, p); }

// cp.async and its waits with "memory" clobbers: the shared-memory reads of a stage must stay after
// the wait that lands it, and before the copy that refills it.
__device__ __forceinline__ void ring_copy16(void* smem, const void* gmem) {
  const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem) : "memory");
}
__device__ __forceinline__ void ring_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void ring_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Element offset of activation row r, 16-byte unit u (8 bf16) in the swizzled [16][k] tile (k: the row
// stride, a multiple of 64).
__device__ __forceinline__ int x_off(int k, int r, int u) { return r * k + ((u ^ (r & 7)) << 3); }

template <W4Format F>
__device__ __forceinline__ ScaleRegs<Trait<F>::kScaleWords> lds_scales(const unsigned char* p) {
  ScaleRegs<Trait<F>::kScaleWords> sc;
  if constexpr (Trait<F>::kScaleWords == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    sc.w[0] = v.x, sc.w[1] = v.y;
  } else {
    sc.w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
  return sc;
}

// XR: activation rows held in shared memory — 16 (a tile in one pass, one or two token fragments) or
// 8 (one fragment; a tile of 9–16 rows takes a second pass over its weights, whose shared memory goes
// to deeper rings instead).
template <W4Format F, int STAGES, int XR, typename Tout>
__global__ void __launch_bounds__(DecodeCfg<F, STAGES>::kThreads, 1)
    moe_w4_decode_kernel(GemmArgs a, DecodeSplit sp, int nb, const int32_t* __restrict__ tile_count,
                         const int4* __restrict__ tiles) {
  using T = Trait<F>;
  using C = DecodeCfg<F, STAGES>;
  constexpr int kSB = C::kSB, kStage = C::kStageBytes, kSlices = C::kSlices, kLd = kDecodeRedLd;
  constexpr int kSbLane = scale_bytes_per_lane(T::kBits);
  const int K = a.k, N = a.n, KC = K / kChunk;
  const int S = sp.splits, CPS = sp.chunks;  // one split: CPS = KC
  const int XK = CPS * kChunk;               // activation row stride in shared memory
  const int nbs = nb * S;                    // units per tile

  const int64_t units = static_cast<int64_t>(*tile_count) * nbs;
  const int u_begin = static_cast<int>(blockIdx.x * units / gridDim.x);
  const int u_end = static_cast<int>((blockIdx.x + 1) * units / gridDim.x);
  if (u_begin >= u_end) return;  // uniform over the CTA

  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* sx = reinterpret_cast<bf16*>(smem_raw);                          // [XR][XK], swizzled
  unsigned char* ring_all = smem_raw + static_cast<size_t>(XR) * XK * 2;  // [warps][STAGES][kStage]
  float* red = reinterpret_cast<float*>(ring_all + C::kWarps * STAGES * kStage);     // [slices][8 tokens][kLd]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gp = warp & 1, ks = warp >> 1;  // groups 2·gp, 2·gp + 1 of the unit; K slice
  // Chunks of split s, and this warp's share of kc chunks: a per-unit count where the last split is
  // shorter (a warp may have none in a unit: it copies and multiplies nothing there, but still meets
  // the unit's block barriers).
  auto split_chunks = [&](int s) { return min(CPS, KC - s * CPS); };
  auto warp_chunks = [&](int kc) { return ks < kc ? (kc - ks + kSlices - 1) / kSlices : 0; };
  unsigned char* ring = ring_all + warp * STAGES * kStage;

  // Producer: the next stage this warp copies — unit pu (tile pq, split psp, block pblk), pass pp,
  // chunk index pi of pnj — into ring slot pslot: 16 bytes of codes per lane and group from pc (group
  // 1 at + KC·512), the two groups' scales (2·kSB bytes) by the first 2·kSB/16 lanes from ps. Pointers
  // advance 8 chunks per stage; the 64-bit index arithmetic runs once per unit.
  //
  // Ring accounting: every issue() call commits exactly one group, and a call copies the next stage
  // of the sequence the consumer reads — units in order, each pass of a unit, the warp's pnj chunks of
  // the unit's split — skipping units where pnj = 0 (the consumer runs no iterations there); once that
  // sequence ends the groups are empty. The consumer calls issue() once per stage it reads, so before
  // it reads its i-th stage (from 0) STAGES − 1 + i groups are committed and wait_group<STAGES − 2>
  // means groups 0 … i, the i-th stage's included, have landed.
  constexpr int kScaleLanes = kSB / 16;  // lanes per group's scales
  const bool scale_lane = lane < 2 * kScaleLanes;
  const int64_t sc_lane_off = lane < kScaleLanes ? lane * 16 : static_cast<int64_t>(KC) * kSB + (lane - kScaleLanes) * 16;
  const int64_t g1_codes = static_cast<int64_t>(KC) * kChunkCodeBytes;
  int pu = u_begin, pp = 0, pi = 0, pslot = 0;
  int pq = pu / nbs, psp = (pu - pq * nbs) / nb, pblk = pu - pq * nbs - psp * nb;
  int pe = 0, pnpass = 1, pnj = 0;
  auto tile_info = [&]() {
    const int4 tile = tiles[pq];
    pe = tile.x;
    if constexpr (XR < kDecodeXRows) pnpass = (min(kDecodeXRows, a.offsets[pe + 1] - tile.y) + XR - 1) / XR;
  };
  tile_info();
  const uint8_t* pc = nullptr;
  const uint8_t* ps = nullptr;
  bool pv0 = false, pv1 = false, pvs = false;
  auto unit_base = [&]() {
    const int f = pblk * 64 + 32 * gp;
    pv0 = f < N, pv1 = f + 16 < N;  // groups past N (N % 64 != 0) are neither copied nor stored
    pvs = lane < kScaleLanes ? pv0 : pv1;
    pnj = warp_chunks(split_chunks(psp));
    const int64_t chunk = (static_cast<int64_t>(pe) * N + f) / kRowGroup * KC + psp * CPS + ks;
    pc = a.codes + chunk * kChunkCodeBytes + lane * 16;
    ps = a.scales + chunk * kSB + sc_lane_off;
  };
  auto next_unit = [&]() {  // pu + 1, from its first pass (pp = 0, pi = 0)
    ++pu;
    if (++pblk == nb) {
      pblk = 0;
      if (++psp == S) {
        psp = 0;
        ++pq;
        if (pu < u_end) tile_info();
      }
    }
    unit_base();
  };
  auto skip_idle = [&]() {  // past the units (all their passes) with no chunks for this warp
    while (pnj == 0 && pu < u_end) next_unit();
  };
  unit_base();
  skip_idle();
  auto issue = [&]() {
    if (pu < u_end) {  // and pnj > 0 (skip_idle)
      unsigned char* dst = ring + pslot * kStage;
      if (pv0) ring_copy16(dst + lane * 16, pc);
      if (pv1) ring_copy16(dst + kChunkCodeBytes + lane * 16, pc + g1_codes);
      if (scale_lane && pvs) ring_copy16(dst + 2 * kChunkCodeBytes + lane * 16, ps);
      pc += kSlices * kChunkCodeBytes;
      ps += kSlices * kSB;
      if (++pi == pnj) {
        pi = 0;
        if (++pp == pnpass) {
          pp = 0;
          next_unit();
          skip_idle();
        } else {
          unit_base();  // the same unit again for its next pass
        }
      }
      pslot = pslot + 1 == STAGES ? 0 : pslot + 1;
    }
    ring_commit();  // one group per call, empty or not: the waits below count groups
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) issue();
  // Launched as a programmatic dependent (launch.h) of the kernel that writes the activations (the
  // gather, or the activation before GEMM 2; both let it start at once): the weights above stream
  // while that kernel finishes — the tile map they follow is the dispatch's, complete before it
  // began. The activations are read and the outputs written only after this. The kernel after it
  // (the activation after GEMM 1, itself a dependent that waits) may then launch at once, and with it
  // GEMM 2's weight streaming on the SMs this grid leaves.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");

  const int g = lane >> 2, t = lane & 3;
  // ldmatrix row addresses (elements, before the chunk's 64·c): one token fragment — tokens 0–7,
  // units 0–3 then 4–7 of the chunk; two — tokens 0–15, units 2s + (0|1) of step s.
  const int r1 = lane & 7, q1 = lane >> 3;
  const int xo1a = x_off(XK, r1, q1), xo1b = x_off(XK, r1, 4 + q1);
  const int r2 = (lane & 7) + (XR > 8 ? 8 * (lane >> 4) : 0), h2 = (lane >> 3) & 1;
  const int xo2[4] = {x_off(XK, r2, h2), x_off(XK, r2, 2 + h2), x_off(XK, r2, 4 + h2), x_off(XK, r2, 6 + h2)};

  int cslot = 0, cq = -1, xq = -1, xs = -1, xp = -1, expert = 0, r0 = 0, rows = 0, npass = 1;
  for (int u = u_begin; u < u_end; ++u) {
    const int q = u / nbs, s = (u - q * nbs) / nb, blk = u - q * nbs - s * nb;
    if (q != cq) {
      const int4 tile = tiles[q];
      cq = q, expert = tile.x, r0 = tile.y;
      rows = min(kDecodeXRows, a.offsets[expert + 1] - r0);
      npass = (rows + XR - 1) / XR;
    }
    const int kc = split_chunks(s), nj = warp_chunks(kc);  // the producer's pnj for this unit
    for (int p = 0; p < npass; ++p) {
      if (q != xq || s != xs || p != xp) {
        // Rows XR·p … of a tile, the split's columns, into shared memory. Every warp finished reading
        // the previous ones before the last reduction barriers. Plain loads, not cp.async: the rings'
        // group counts stay untouched.
        xq = q, xs = s, xp = p;
        const bf16* xg = static_cast<const bf16*>(a.x) + static_cast<int64_t>(r0 + XR * p) * a.ldx + s * XK;
        const int qk = kc * (kChunk / 8), xr = min(XR, rows - XR * p);
        for (int i = tid; i < xr * qk; i += C::kThreads) {
          const int r = i / qk, c = i - r * qk;
          *reinterpret_cast<uint4*>(sx + x_off(XK, r, c)) =
              *reinterpret_cast<const uint4*>(xg + static_cast<int64_t>(r) * a.ldx + c * 8);
        }
        __syncthreads();
      }
      const bool two = XR > 8 && rows > 8;  // token fragments: one (rows ≤ 8, or XR = 8) or two

      float acc[2][2][4];  // [group][token fragment]
#pragma unroll
      for (int i = 0; i < 16; ++i) (&acc[0][0][0])[i] = 0.0f;
      const bf16* xc = sx + ks * kChunk;  // this warp's first chunk of the split's x
      for (int i = 0; i < nj; ++i, xc += kSlices * kChunk) {
        ring_wait<STAGES - 2>();  // this lane's copies of the oldest stage landed
        __syncwarp();             // and every lane's (the scales come from a few lanes)
        const unsigned char* src = ring + cslot * kStage;
        const uint4 w0 = *reinterpret_cast<const uint4*>(src + lane * 16);
        const uint4 w1 = *reinterpret_cast<const uint4*>(src + kChunkCodeBytes + lane * 16);
        const auto s0 = lds_scales<F>(src + 2 * kChunkCodeBytes + g * kSbLane);
        const auto s1 = lds_scales<F>(src + 2 * kChunkCodeBytes + kSB + g * kSbLane);
        // Refill the slot read in the previous iteration (every lane is past it: the __syncwarp above).
        issue();
        cslot = cslot + 1 == STAGES ? 0 : cslot + 1;
        uint32_t af[4];
        uint32_t b[4];
        if (!two) {
          // ldmatrix.x4: tokens 0–7 × the chunk's units 0–3 (then 4–7) = b0, b1 of steps 0, 1 (2, 3).
          ldsm4(b, xc + xo1a);
          dequant<F, 0>(af, w0.x, s0);
          mma_bf16(acc[0][0], af, b[0], b[1]);
          dequant<F, 0>(af, w1.x, s1);
          mma_bf16(acc[1][0], af, b[0], b[1]);
          dequant<F, 1>(af, w0.y, s0);
          mma_bf16(acc[0][0], af, b[2], b[3]);
          dequant<F, 1>(af, w1.y, s1);
          mma_bf16(acc[1][0], af, b[2], b[3]);
          ldsm4(b, xc + xo1b);
          dequant<F, 2>(af, w0.z, s0);
          mma_bf16(acc[0][0], af, b[0], b[1]);
          dequant<F, 2>(af, w1.z, s1);
          mma_bf16(acc[1][0], af, b[0], b[1]);
          dequant<F, 3>(af, w0.w, s0);
          mma_bf16(acc[0][0], af, b[2], b[3]);
          dequant<F, 3>(af, w1.w, s1);
          mma_bf16(acc[1][0], af, b[2], b[3]);
        } else if constexpr (XR > 8) {
          // Per k16 step: tokens 0–7 and 8–15 = {b0, b1} of each n8 fragment.
#define K3_W4_DECODE_STEP2(S, WORD)              \
  ldsm4(b, xc + xo2[S]);                         \
  dequant<F, S>(af, w0.WORD, s0);                \
  mma_bf16(acc[0][0], af, b[0], b[1]);           \
  mma_bf16(acc[0][1], af, b[2], b[3]);           \
  dequant<F, S>(af, w1.WORD, s1);                \
  mma_bf16(acc[1][0], af, b[0], b[1]);           \
  mma_bf16(acc[1][1], af, b[2], b[3]);
          K3_W4_DECODE_STEP2(0, x)
          K3_W4_DECODE_STEP2(1, y)
          K3_W4_DECODE_STEP2(2, z)
          K3_W4_DECODE_STEP2(3, w)
#undef K3_W4_DECODE_STEP2
        }
      }

      // The eight K slices' partial sums: red[slice][token][row] (rows 0–31 from the even warp of the
      // slice, 32–63 from the odd one; the row stride kDecodeRedLd = 68 makes these stores and the
      // reads below conflict-free), summed in slice order, one output per thread.
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (j == 1 && !two) break;
        float* pr = red + ks * 8 * kLd + 32 * gp + g;
#pragma unroll
        for (int mm = 0; mm < 2; ++mm) {
          pr[(2 * t) * kLd + 16 * mm] = acc[mm][j][0];
          pr[(2 * t + 1) * kLd + 16 * mm] = acc[mm][j][1];
          pr[(2 * t) * kLd + 16 * mm + 8] = acc[mm][j][2];
          pr[(2 * t + 1) * kLd + 16 * mm + 8] = acc[mm][j][3];
        }
        __syncthreads();
        {
          const int tok = tid >> 6, fl = tid & 63;
          const int token = XR * p + 8 * j + tok, f = blk * 64 + fl;
          if (token < rows && f < N) {
            float sum = 0.0f;
#pragma unroll
            for (int k2 = 0; k2 < kSlices; ++k2) sum += red[(k2 * 8 + tok) * kLd + fl];
            if (S > 1) {  // the raw partial sum; launch_split_sum scales the splits' total
              sp.part[(static_cast<int64_t>(s) * sp.rows + r0 + token) * N + f] = sum;
            } else {
              float scale = static_cast<float>(1 << kOffsetLog2) * a.out_scale[expert * a.parts + f / a.part_rows];
              if (a.row_weight != nullptr) scale *= a.row_weight[r0 + token];
              Tout* y = static_cast<Tout*>(a.y) + static_cast<int64_t>(r0 + token) * a.ldy + f;
              store_val(y, sum * scale);
            }
          }
        }
        __syncthreads();
      }
    }  // passes
  }
}

// The grid: min(SMs, the units of map.bound tiles) CTAs — host-known shapes only.
template <W4Format F, int STAGES, int XR, typename Tout>
void launch_decode_cfg(const GemmArgs& a, const DecodeSplit& sp, const MoeTileMap& map, cudaStream_t stream) {
  using C = DecodeCfg<F, STAGES>;
  const int nb = (a.n + 63) / 64;
  const int kc = a.k / kChunk;
  if (sp.splits < 1 || sp.chunks < 1 || (sp.splits - 1) * sp.chunks >= kc || sp.splits * sp.chunks < kc ||
      (sp.splits > 1 && sp.part == nullptr)) {
    throw Error("moe_grouped_gemm_w4: bad decode split: " + std::to_string(sp.splits) + " splits of " +
                std::to_string(sp.chunks) + " chunks for K " + std::to_string(a.k));
  }
  const size_t smem = decode_smem_bytes(F, static_cast<int64_t>(sp.chunks) * kChunk, STAGES, XR);
  const int sms = current_multiprocessors();
  const int64_t units = map.bound * nb * sp.splits;
  if (units > INT32_MAX) throw Error("moe_grouped_gemm_w4: too many decode units");
  const int grid = static_cast<int>(std::min<int64_t>(sms, units));
  if (grid <= 0) return;
  auto* kernel = moe_w4_decode_kernel<F, STAGES, XR, Tout>;
  allow_dynamic_smem(kernel, smem);
  launch_dependent(kernel, dim3(grid), dim3(C::kThreads), smem, stream, a, sp, nb, map.count,
                   reinterpret_cast<const int4*>(map.tiles));
}

template <W4Format F, int STAGES, int XR>
void launch_decode_out(bool f32_out, const GemmArgs& a, const DecodeSplit& sp, const MoeTileMap& map,
                       cudaStream_t stream) {
  if (f32_out) {
    launch_decode_cfg<F, STAGES, XR, float>(a, sp, map, stream);
  } else {
    launch_decode_cfg<F, STAGES, XR, bf16>(a, sp, map, stream);
  }
}

template <W4Format F>
void launch_decode(DecodeShape shape, bool f32_out, const GemmArgs& a, const DecodeSplit& sp, const MoeTileMap& map,
                   cudaStream_t stream) {
  if (shape.stages == kDecode16.stages && shape.xrows == kDecode16.xrows) {
    launch_decode_out<F, kDecode16.stages, kDecode16.xrows>(f32_out, a, sp, map, stream);
  } else if (shape.stages == kDecode16Shallow.stages && shape.xrows == kDecode16Shallow.xrows) {
    launch_decode_out<F, kDecode16Shallow.stages, kDecode16Shallow.xrows>(f32_out, a, sp, map, stream);
  } else if (shape.stages == kDecode8.stages && shape.xrows == kDecode8.xrows) {
    launch_decode_out<F, kDecode8.stages, kDecode8.xrows>(f32_out, a, sp, map, stream);
  } else {
    throw Error("moe_grouped_gemm_w4: no decode kernel with " + std::to_string(shape.stages) + " stages and " +
                std::to_string(shape.xrows) + " activation rows");
  }
}

}  // namespace k3::cuda::w4
