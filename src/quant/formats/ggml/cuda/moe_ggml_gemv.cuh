// The GGUF experts' decode grouped GEMV (moe_ggml.h, moe_grouped_gemv_ggml): one kernel, a template
// over the block traits of moe_ggml_blocks.h, the weight rows a warp streams at once (RW) and the
// tokens it holds accumulators for at once (TC). Included by the two translation units that
// instantiate gemv_launch (moe_ggml_gemv_chunk1.cu, moe_ggml_gemv_chunk4.cu) and by the host side
// (moe_ggml_gemv.cu), which sees only the instantiations.
//
// CTA → (tile of ≤ 16 sorted rows of one expert, a slice of weight rows) as in moe_w4_gemm.cuh: an
// expert's token tiles run back to back for each slice of weight rows, so a slice comes from DRAM
// once while the expert's tiles go by. A slice is gemv_cta_rows(RW) rows, or fewer where the grid
// would not fill one wave of the residency's CTAs per SM (moe_ggml_gemv_slice_rows: a bank of one
// expert). Warp w takes the groups of RW consecutive weight rows RW·(w + 8i); lane l takes part
// l % kParts of block l / kParts of each warp step (1024 elements).
//
// Weights: each warp streams its work through its own cp.async ring in shared memory
// (Geometry: 2–4 stages; one commit group per stage, one counted wait per stage, no block barrier), so
// all but one stage of every warp are genuinely in flight (register prefetch tops out near two loads
// deep: ptxas tracks them on a few scoreboards; moe_w4_decode.cuh). A stage holds `sps` warp steps of
// each of the RW rows — the whole row where it fits — per row one contiguous piece copied as its
// 16-byte aligned cover: 16-byte transactions in every format, the address modulo 16 kept (the traits'
// aligned loads hold in shared memory), the copy's bookkeeping paid once per piece. A warp's work items
// (row group, stage block of steps) are one flat sequence, so the ring runs on across row groups.
// Compute: per step a lane loads each token's activation registers once (F::xload), then per row
// unpacks its codes and scales once (F::unpack) and runs the integer dot per token (F::dot). Tokens go
// by in chunks of TC accumulators: within the stage when it holds whole rows, else as further items
// that stream the rows again (from L2). TC = 4 suits tiles of several tokens; TC = 1 (one-token tiles,
// the common decode case) needs fewer registers and so fits three CTAs per SM, built for the types
// where that measured faster (gemv_one_token_type). Every output is one
// warp's sum over the same steps in the same order whatever TC, RW's group or the slice: the results
// are bit-identical. Launched as a programmatic dependent of the quantisation: the ring fills before
// griddepcontrol.wait, the activations are read after it.
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/launch.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "quant/formats/ggml/cuda/moe_ggml.h"
#include "quant/formats/ggml/cuda/moe_ggml_blocks.h"
#include "backend/cuda/moe/moe_tile.cuh"
#include "backend/cuda/moe/moe_tiles.h"

namespace k3::cuda::ggml_gemv {

namespace gb = ggml_blocks;
using detail::bf16;

constexpr int kGemvWarps = 8;
constexpr int kGemvRows = 128;          // weight rows per CTA at most
// Weight rows per CTA: whole groups of RW rows for each warp (RW = 3: 120).
constexpr int gemv_cta_rows(int rw) { return kGemvRows / (kGemvWarps * rw) * kGemvWarps * rw; }
constexpr int kGemvTokens = 16;         // the kM16 tile map's height
constexpr int kMaxSmem = 227 * 1024;    // one CTA per SM

// The two residencies, by the tokens a warp holds accumulators for at once (TC, the token chunk):
// TC = 4 at two CTAs per SM (ptxas: 128 registers, a few spill for some types), TC = 1 at three (80
// registers, none spill), the ring taking the CTA's share of the SM's 228 KB less 1 KB reserved.
constexpr int gemv_ctas_per_sm(int tc) { return tc == 1 ? 3 : 2; }
constexpr int gemv_ring_bytes(int tc) { return (228 / gemv_ctas_per_sm(tc) - 1) * 1024; }
// The types built at TC = 1 (moe_ggml_gemv_token_chunk says where the model takes it).
constexpr bool gemv_one_token_type(GgmlType type) { return type == GgmlType::Q2_K; }

// The ring of one launch (host-chosen from the format, RW and K): `sps` steps per stage, `stages`
// stages of RW pieces `stride` bytes apart.
struct Geometry {
  int sps, nblk;  // steps per stage; stage blocks per row
  int stride;     // bytes per row piece: its 16-byte aligned cover
  int stages;     // 2..4
  int smem() const { return kGemvWarps * stages * stride * rws; }
  int rws;        // RW
};

template <class F>
constexpr int kPerStep = 32 / F::kParts;  // blocks per warp step

template <class F>
Geometry geometry(int rw, int k, int ring_bytes) {
  const int nb = k / F::kBlock, steps = (nb + kPerStep<F> - 1) / kPerStep<F>;
  auto stride = [&](int sps) { return (std::min(nb, sps * kPerStep<F>) * F::kBytes + 15) / 16 * 16 + 16; };
  // The most steps per stage with two stages in the CTA's share (whole rows where they fit: every
  // item pays ~400 instructions of copy and bookkeeping, as much as two steps of Q2_K at T = 1 —
  // Nsight, 2026-12-02), then as many stages as fit, 2..4.
  int sps = steps;
  while (sps > 1 && kGemvWarps * 2 * rw * stride(sps) > ring_bytes) sps = (sps + 1) / 2;
  Geometry g{sps, (steps + sps - 1) / sps, stride(sps), 2, rw};
  g.stages = std::clamp(ring_bytes / (kGemvWarps * rw * g.stride), 2, 4);
  if (g.smem() > kMaxSmem) throw Error("moe_grouped_gemv_ggml: K " + std::to_string(k) + " too large for the ring");
  return g;
}

struct GemvArgs {
  const uint8_t* w;
  const uint8_t* w_end;  // the bank's end: the last row's cover is cut there
  int64_t row_bytes;
  MoeGgmlActs x;
  void* y;
  int64_t ldy;
  int n, k;
  const int32_t* offsets;
  const float* row_weight;  // [R] or null: each sorted row's output scaled by it (MoeDispatch::row_weight)
  int slice_rows;           // weight rows per CTA: a multiple of kGemvWarps · RW, at most gemv_cta_rows(RW)
};

__device__ __forceinline__ void store_out(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_out(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

// 16 bytes global → shared; or only the first `bytes` (0..16) of them read, the rest zero-filled.
// "memory" clobbers: the ring's shared reads stay between the wait that lands a stage and the copy
// that refills it.
__device__ __forceinline__ void copy16(unsigned saddr, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(saddr), "l"(gmem) : "memory");
}
__device__ __forceinline__ void copy16(unsigned saddr, const void* gmem, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem), "r"(bytes) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most stages − 2 groups are pending.
__device__ __forceinline__ void wait_ring(int stages) {
  if (stages == 4) {
    asm volatile("cp.async.wait_group 2;\n" ::: "memory");
  } else if (stages == 3) {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  } else {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  }
}

template <class F, typename Tout, int RW, int TC>
__global__ void __launch_bounds__(kGemvWarps * 32, gemv_ctas_per_sm(TC)) gemv_kernel(GemvArgs a, Geometry geo, int n_slices,
                                                               const int32_t* __restrict__ tile_count,
                                                               const int4* __restrict__ tiles) {
  constexpr int kStep = kPerStep<F>;
  detail::MoeCtaTile ct;
  if (!detail::moe_cta_tile(n_slices, kGemvTokens, a.slice_rows, tile_count, tiles, a.offsets, ct)) return;
  const int r0 = ct.row0, rows = ct.rows;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = lane % F::kParts, lb = lane / F::kParts;
  const int nb = a.k / F::kBlock, steps = (nb + kStep - 1) / kStep;

  // This warp's items: row groups f = first + kGroupStride·g (rows past N clamp to N − 1 and are not
  // stored), token chunks (unless a stage holds whole rows), stage blocks. Warp-uniform; the kernel
  // has no block barrier, so idle warps exit.
  constexpr int kGroupStride = kGemvWarps * RW;
  const int first = ct.col0 + RW * warp, f_end = min(ct.col0 + a.slice_rows, a.n);
  const int groups = first < f_end ? (f_end - first + kGroupStride - 1) / kGroupStride : 0;
  const int chunks = (rows + TC - 1) / TC;
  const int item_chunks = geo.nblk == 1 ? 1 : chunks;
  const int items = groups * item_chunks * geo.nblk;
  if (items == 0) return;

  extern __shared__ __align__(16) uint8_t smem[];
  const int stage_bytes = RW * geo.stride;
  uint8_t* const ring = smem + warp * geo.stages * stage_bytes;
  const unsigned ring_s = static_cast<unsigned>(__cvta_generic_to_shared(ring));
  const uint8_t* const wexp = a.w + static_cast<int64_t>(ct.expert) * a.n * a.row_bytes;
  const int piece_bytes = geo.sps * kStep * F::kBytes;
  // Where group g's first row starts (whole-row stages), and where its row i starts stage block sb
  // (rows past N clamp to N − 1).
  auto group_row0 = [&](int g) { return wexp + static_cast<int64_t>(first + kGroupStride * g) * a.row_bytes; };
  auto piece = [&](int g, int i, int sb) {
    return wexp + static_cast<int64_t>(min(first + kGroupStride * g + i, a.n - 1)) * a.row_bytes +
           static_cast<int64_t>(sb) * piece_bytes;
  };

  // Producer: item pi = (pg, pc, pb) into slot pslot.
  int pi = 0, pg = 0, pc = 0, pb = 0, pslot = 0;
  auto issue = [&]() {
    if (pi < items) {
      if (geo.nblk == 1) {
        // Whole rows: the group's RW rows are adjacent in the bank, so the stage is one span, their
        // 16-byte aligned cover (row i at span_offset() + i·row_bytes; within RW·stride). Rows past N
        // bring whatever follows them (computed, never stored), zeros past the bank's end.
        const uint8_t* src = group_row0(pg);
        const uint8_t* a0 = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(src) & ~uintptr_t{15});
        const int n16 = static_cast<int>((src + RW * a.row_bytes - a0 + 15) >> 4);
        const int64_t left = a.w_end - a0;
        const unsigned dst = ring_s + pslot * stage_bytes;
        if (left >= 16 * n16) {
          for (int c = lane; c < n16; c += 32) copy16(dst + 16 * c, a0 + 16 * c);
        } else {  // the bank's last rows: read up to its end, then zero-fill (a 0-byte read of a.w)
          for (int c = lane; c < n16; c += 32) {
            const int64_t bytes = left - 16 * c;
            copy16(dst + 16 * c, bytes > 0 ? a0 + 16 * c : a.w, bytes >= 16 ? 16 : bytes > 0 ? static_cast<int>(bytes) : 0);
          }
        }
      } else {
        const int len = min(piece_bytes, (nb - pb * geo.sps * kStep) * F::kBytes);
#pragma unroll
        for (int i = 0; i < RW; ++i) {
          const uint8_t* src = piece(pg, i, pb);
          const uint8_t* a0 = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(src) & ~uintptr_t{15});
          const int n16 = static_cast<int>((src + len - a0 + 15) >> 4);
          const int64_t left = a.w_end - a0;  // > 16·(n16 − 1)
          const int last = left >= 16 * n16 ? 16 : static_cast<int>(left - 16 * (n16 - 1));
          const unsigned dst = ring_s + pslot * stage_bytes + i * geo.stride;
          for (int c = lane; c < n16; c += 32) copy16(dst + 16 * c, a0 + 16 * c, c == n16 - 1 ? last : 16);
        }
      }
      if (++pb == geo.nblk) {
        pb = 0;
        if (++pc == item_chunks) pc = 0, ++pg;
      }
      pslot = pslot + 1 == geo.stages ? 0 : pslot + 1;
    }
    ++pi;
    commit();  // one group per call, empty or not: the waits count groups
  };
  for (int s = 0; s < geo.stages - 1; ++s) issue();
  // Launched as a programmatic dependent of moe_ggml_quantize: the weights above stream while it
  // finishes; its activations are read only after this.
  asm volatile("griddepcontrol.wait;" ::: "memory");

  float acc[RW][TC];
  int cg = 0, cc = 0, cb = 0, cslot = 0;
  for (int it = 0; it < items; ++it) {
    wait_ring(geo.stages);  // this lane's copies of item `it` have landed
    __syncwarp();           // ... and every lane's; the slot read last item is free
    issue();
    const uint8_t* st = ring + cslot * stage_bytes + lb * F::kBytes;
    int off[RW];  // where each row's piece starts in the stage
    if (geo.nblk == 1) {
      const int head = static_cast<int>(reinterpret_cast<uintptr_t>(group_row0(cg)) & 15);
#pragma unroll
      for (int i = 0; i < RW; ++i) off[i] = head + i * static_cast<int>(a.row_bytes);
    } else {
#pragma unroll
      for (int i = 0; i < RW; ++i) off[i] = i * geo.stride + static_cast<int>(reinterpret_cast<uintptr_t>(piece(cg, i, cb)) & 15);
    }
    const int f0 = first + kGroupStride * cg;
    const int s0 = cb * geo.sps, s1 = min(steps, s0 + geo.sps);
    const int c_begin = geo.nblk == 1 ? 0 : cc, c_end = geo.nblk == 1 ? chunks : cc + 1;
    for (int c = c_begin; c < c_end; ++c) {
      const int t0 = c * TC, nt = min(TC, rows - t0);
      if (cb == 0) {
#pragma unroll
        for (int i = 0; i < RW; ++i) {
#pragma unroll
          for (int t = 0; t < TC; ++t) acc[i][t] = 0.0f;
        }
      }
      // The steps for exactly NT tokens (no per-token guards: a 1-token tile issues one token's work).
      auto steps_for = [&](auto nt_c) {
        constexpr int NT = decltype(nt_c)::value;
        for (int s = s0; s < s1; ++s) {
          const int b = s * kStep + lb;
          if (b >= nb) break;  // the last step of a row may be partial
          typename F::X xv[NT];
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            const int64_t xr = r0 + t0 + t;
            const gb::ActBlock x{a.x.q + xr * a.k + static_cast<int64_t>(b) * F::kBlock,
                                 a.x.sums + xr * (a.k / 16) + static_cast<int64_t>(b) * (F::kBlock / 16),
                                 a.x.scale[xr * nb + b]};
            xv[t] = F::xload(x, part);
          }
          const uint8_t* sb = st + (s - s0) * (kStep * F::kBytes);
#pragma unroll
          for (int i = 0; i < RW; ++i) {
            const typename F::U u = F::unpack(sb + off[i], part);
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[i][t] += F::dot(u, xv[t]);
          }
        }
      };
      if constexpr (TC == 1) {
        steps_for(std::integral_constant<int, 1>{});
      } else {
        static_assert(TC == 4);
        switch (nt) {
          case 1: steps_for(std::integral_constant<int, 1>{}); break;
          case 2: steps_for(std::integral_constant<int, 2>{}); break;
          case 3: steps_for(std::integral_constant<int, 3>{}); break;
          default: steps_for(std::integral_constant<int, 4>{}); break;
        }
      }
      if (cb == geo.nblk - 1) {
#pragma unroll
        for (int t = 0; t < TC; ++t) {
          if (t >= nt) break;
          const float rw = a.row_weight != nullptr ? a.row_weight[r0 + t0 + t] : 1.0f;
#pragma unroll
          for (int i = 0; i < RW; ++i) {
            const float v = detail::warp_sum(acc[i][t]) * rw;
            if (lane == 0 && f0 + i < a.n) store_out(static_cast<Tout*>(a.y) + (r0 + t0 + t) * a.ldy + f0 + i, v);
          }
        }
      }
    }
    if (++cb == geo.nblk) {
      cb = 0;
      if (++cc == item_chunks) cc = 0, ++cg;
    }
    cslot = cslot + 1 == geo.stages ? 0 : cslot + 1;
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // no copy outlives the warp
}

template <int TC, int RW>
void launch_rw(GgmlType type, bool f32_out, const GemvArgs& a, int n_slices, unsigned blocks, const MoeTileMap& map,
               cudaStream_t stream) {
  const auto* tiles = reinterpret_cast<const int4*>(map.tiles);
  gb::visit(type, [&](auto trait) {
    using F = decltype(trait);
    if constexpr (TC == 4 || gemv_one_token_type(F::kType)) {  // the host refuses the others
      const Geometry geo = geometry<F>(RW, a.k, gemv_ring_bytes(TC));
      auto run = [&](auto kernel) {
        allow_dynamic_smem(kernel, geo.smem());
        launch_dependent(kernel, dim3(blocks), dim3(kGemvWarps * 32), geo.smem(), stream, a, geo, n_slices, map.count, tiles);
      };
      if (f32_out) {
        run(gemv_kernel<F, float, RW, TC>);
      } else {
        run(gemv_kernel<F, bf16, RW, TC>);
      }
    }
  });
}

// The launch at token chunk TC (explicitly instantiated, one translation unit each:
// moe_ggml_gemv_chunk1.cu, moe_ggml_gemv_chunk4.cu).
template <int TC>
void gemv_launch(GgmlType type, bool f32_out, int rw, const GemvArgs& a, int n_slices, unsigned blocks,
                 const MoeTileMap& map, cudaStream_t stream) {
  if (rw == 2) launch_rw<TC, 2>(type, f32_out, a, n_slices, blocks, map, stream);
  if (rw == 3) launch_rw<TC, 3>(type, f32_out, a, n_slices, blocks, map, stream);
  if (rw == 4) launch_rw<TC, 4>(type, f32_out, a, n_slices, blocks, map, stream);
}
extern template void gemv_launch<1>(GgmlType, bool, int, const GemvArgs&, int, unsigned, const MoeTileMap&, cudaStream_t);
extern template void gemv_launch<4>(GgmlType, bool, int, const GemvArgs&, int, unsigned, const MoeTileMap&, cudaStream_t);

}  // namespace k3::cuda::ggml_gemv
