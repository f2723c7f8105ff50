// The 4-bit expert grouped GEMM on Hopper warpgroup MMA (W4Kernel::kWgmma, the prefill class; moe_w4.h).
// moe_w4_wgmma_nvfp4.cu and moe_w4_wgmma_mxfp4.cu instantiate it.
//
// Swapped operands as in moe_w4_gemm.cuh: D[feature][token] = Σ_k W[feature][k] · x[token][k]. A work
// item is one tile of the kM128 tile map (≤ 128 sorted rows of one expert) × 128 weight rows (eight
// 16-row groups of the bank, two 64-row halves). Persistent CTAs (one per SM, five warpgroups) walk
// the items with a stride of the grid, warp-specialised, every hand-over on a full/empty mbarrier pair:
//   - producers, warpgroup 0 (one lane each of warps 0 and 1): the item's activation rows, one
//     64-column chunk at a time, by TMA (boxes of 16 rows × 64 columns, as many as the item has rows;
//     the 128-byte swizzle = the wgmma B operand layout) into a ring of kXStages stages; the packed
//     codes and block scales of the eight groups, two chunks at a time (3-D boxes of the bank) into a
//     deeper ring of kWStages stages: weights come from HBM once per item, many chunks in flight;
//   - dequantising warps, warpgroups 3 and 4 (DequantWarp, one 16-row group each): dequant() in
//     registers, stmatrix into the half's next free A tile (kABuffers per half);
//   - MMA warpgroups 1 and 2 (MmaWarpgroup, one per half): four wgmma m64nNk16 per chunk from the A
//     tile and the activation stage, one group in flight while the next is issued.
// The dequantisation thus runs ahead of the MMAs instead of in line with them: in one warpgroup that
// did both (dequantise, store, barrier, MMA; 2026-12-01) each warp issued ~225 instructions per chunk
// and the SM ~1200 cycles per chunk at ~0.5 instructions per scheduler and cycle (Nsight Compute,
// H200). (A straight from registers, as in the mma.sync kernels, does not work: ptxas reuses an
// in-flight wgmma's A registers for the next chunk's fragments — wrong results on the H200 — or, when
// they are kept live, serialises the wgmmas.)
// The producers run ahead across items, so an item's epilogue (fp32 × 2^7 · out_scale[expert, part],
// stored in pairs as in moe_w4_gemm.cuh) overlaps the next item's loads and dequantisation. The item
// count is read on the device: graph-capturable. Needs sm_90a.
#pragma once

#include <cuda.h>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/moe_w4_gemm.cuh"
#include "backend/cuda/wgmma.cuh"

namespace k3::cuda::w4 {

template <W4Format F>
struct WgmmaCfg {
  static constexpr int kHalves = 2;  // 64-row halves of an item: one MMA and one dequantising warpgroup each
  static constexpr int kThreads = 128 * (1 + 2 * kHalves);
  static constexpr int kGroups = 4 * kHalves;  // 16-row groups per item, one per dequantising warp
  static constexpr int BF = 16 * kGroups;      // weight rows per item
  static constexpr int BT = 128;               // rows of one expert per item (MoeTile::kM128)
  static_assert(BT % kWgmmaBoxRows == 0 && kWgmmaBoxRows % 8 == 0, "boxes of whole swizzle atoms");
  static constexpr int kXStages = 5;
  static constexpr int kWStages = 8;
  static constexpr int kABuffers = 4;                 // per half
  static constexpr int kWChunks = kWgmmaStageChunks;  // chunks per weight stage
  static constexpr int kScaleBytes = scale_bytes_per_chunk(Trait<F>::kBits);
  static constexpr int kXBytes = BT * 128;  // BT rows × 64 bf16, swizzled
  static constexpr int kCodeBytes = kGroups * kWChunks * kChunkCodeBytes;  // [group][chunk][512]
  static constexpr int kWBytes = kCodeBytes + kGroups * kWChunks * kScaleBytes;
  static_assert(kGroups == kWgmmaBoxGroups && kWBytes % 128 == 0, "the weight boxes fill a stage");
  static constexpr int kABytes = 64 * 128;  // one half's 64 dequantised weight rows × 64 bf16, swizzled
  static constexpr int kAOffset = kXStages * kXBytes;
  static constexpr int kWOffset = kAOffset + kHalves * kABuffers * kABytes;
  static constexpr int kBarOffset = kWOffset + kWStages * kWBytes;
  static constexpr int kBarriers = 2 * (kXStages + kWStages + kHalves * kABuffers);
  static constexpr int kSmemBytes = kBarOffset + kBarriers * 8 + 1024;  // + alignment of the base
};

// A ring position: stage index and the parity of its current phase.
struct RingPos {
  int stage = 0;
  unsigned phase = 0;
  __device__ __forceinline__ void next(int stages) {
    if (++stage == stages) stage = 0, phase ^= 1u;
  }
};

// The kernel's shared memory: the rings and their full/empty mbarrier pairs.
template <W4Format F>
struct WgmmaSmem {
  using C = WgmmaCfg<F>;
  unsigned char* base;
  uint64_t *full_x, *empty_x, *full_w, *empty_w, *full_a, *empty_a;
  __device__ explicit WgmmaSmem(unsigned char* smem) : base(smem) {
    full_x = reinterpret_cast<uint64_t*>(smem + C::kBarOffset);
    empty_x = full_x + C::kXStages;
    full_w = empty_x + C::kXStages;
    empty_w = full_w + C::kWStages;
    full_a = empty_w + C::kWStages;
    empty_a = full_a + C::kHalves * C::kABuffers;
  }
  __device__ unsigned char* x_stage(int i) const { return base + i * C::kXBytes; }
  __device__ unsigned char* w_stage(int i) const { return base + C::kWOffset + i * C::kWBytes; }
  __device__ unsigned char* a_tile(int half, int i) const { return base + C::kAOffset + (half * C::kABuffers + i) * C::kABytes; }
};

// One dequantising warp (group gi of the item's eight, half gi / 4): per chunk, the group's code
// words and block scales from the weight ring → dequant() (the exact bf16 operands E2M1 · block scale ·
// 2^-7 of the mma.sync kernels, in mma-fragment order) → stmatrix into the half's next free A tile
// (128-byte swizzle), then every lane fences its stores for the async proxy and arrives on the tile's
// full barrier. Runs ahead of the MMAs by up to kABuffers chunks, across items.
template <W4Format F>
struct DequantWarp {
  using T = Trait<F>;
  using C = WgmmaCfg<F>;
  const WgmmaSmem<F>& sm;
  int gi, lane;
  uint32_t row_off[4];  // the lane's stmatrix row address within an A tile, per k16 step
  RingPos wpos{}, apos{};

  __device__ DequantWarp(const WgmmaSmem<F>& s, int group, int ln) : sm(s), gi(group), lane(ln) {
    // stmatrix x4 of k16 step s: lanes 8j … 8j + 7 address the rows of matrix j = fragment register
    // a_j (rows g + 8·(j % 2), columns 16s + 8·(j / 2) …).
    const int j = lane >> 3, r = 16 * (gi % 4) + (lane & 7) + 8 * (j & 1);
#pragma unroll
    for (int st = 0; st < 4; ++st) row_off[st] = wgmma::sw128_offset(r, 2 * st + (j >> 1));
  }

  __device__ __forceinline__ void item(int kchunks) {
    const int half = gi / 4;
    for (int c = 0; c < kchunks; ++c) {
      const int p = c % C::kWChunks;
      if (p == 0) bulk::wait(&sm.full_w[wpos.stage], wpos.phase);
      const unsigned char* st = sm.w_stage(wpos.stage);
      const int slot = gi * C::kWChunks + p;
      const uint4 w = *reinterpret_cast<const uint4*>(st + slot * kChunkCodeBytes + lane * 16);
      ScaleRegs<T::kScaleWords> sc;
      const unsigned char* sp = st + C::kCodeBytes + slot * C::kScaleBytes + (lane >> 2) * scale_bytes_per_lane(T::kBits);
#pragma unroll
      for (int j = 0; j < T::kScaleWords; ++j) sc.w[j] = reinterpret_cast<const uint32_t*>(sp)[j];
      if (p == C::kWChunks - 1 || c == kchunks - 1) {  // the stage's last chunk: back to its producer
        __syncwarp();
        if (lane == 0) bulk::arrive(&sm.empty_w[wpos.stage]);
        wpos.next(C::kWStages);
      }
      uint32_t f[4][4];
      dequant<F, 0>(f[0], w.x, sc);
      dequant<F, 1>(f[1], w.y, sc);
      dequant<F, 2>(f[2], w.z, sc);
      dequant<F, 3>(f[3], w.w, sc);
      const int ai = half * C::kABuffers + apos.stage;
      bulk::wait(&sm.empty_a[ai], apos.phase ^ 1u);
      const uint32_t at = bulk::smem_addr(sm.a_tile(half, apos.stage));
#pragma unroll
      for (int s = 0; s < 4; ++s) wgmma::stmatrix_x4(at + row_off[s], f[s]);
      bulk::fence_proxy_async();
      bulk::arrive(&sm.full_a[ai]);
      apos.next(C::kABuffers);
    }
  }
};

// One MMA warpgroup (half h: weight rows 64h … 64h + 63 of the item): per chunk it waits for its A
// tile and the activation stage, issues four wgmma m64nNk16 with both operands in shared memory (N =
// the item's rows rounded up to 16: rows past the expert's are multiplied but never stored), commits,
// and once the previous chunk's group has retired hands that chunk's A tile and activation stage back.
template <W4Format F, typename Tout>
struct MmaWarpgroup {
  using C = WgmmaCfg<F>;
  const GemmArgs& a;
  const WgmmaSmem<F>& sm;
  int half, cw, lane;  // cw: the warp's 16-row group of the item (4·half + warp in the warpgroup)
  RingPos xpos{}, apos{};

  template <int N>
  __device__ __forceinline__ void item(const detail::MoeCtaTile& ct, int kchunks) {
    float acc[N / 2];
#pragma unroll
    for (int j = 0; j < N / 2; ++j) acc[j] = 0.0f;
    int prev_x = -1, prev_a = -1;
    for (int c = 0; c < kchunks; ++c) {
      const int ai = half * C::kABuffers + apos.stage;
      bulk::wait(&sm.full_a[ai], apos.phase);
      bulk::wait(&sm.full_x[xpos.stage], xpos.phase);
      // k16 step s starts 32 bytes further: + 2 in the descriptors' address field.
      const uint64_t da = wgmma::desc_k_sw128(bulk::smem_addr(sm.a_tile(half, apos.stage)));
      const uint64_t dx = wgmma::desc_k_sw128(bulk::smem_addr(sm.x_stage(xpos.stage)));
      wgmma::fence();
#pragma unroll
      for (int s = 0; s < 4; ++s) wgmma::mma_bf16<N>(acc, da + 2 * s, dx + 2 * s);
      wgmma::commit();
      wgmma::wait<1>();  // the previous chunk's group retired: its A tile and activation stage are free
      if (prev_x >= 0 && lane == 0) bulk::arrive(&sm.empty_x[prev_x]), bulk::arrive(&sm.empty_a[prev_a]);
      prev_x = xpos.stage, prev_a = ai;
      xpos.next(C::kXStages);
      apos.next(C::kABuffers);
    }
    wgmma::wait<0>();
#pragma unroll
    for (int j = 0; j < N / 2; ++j) wgmma::fence_operand(acc[j]);
    if (prev_x >= 0 && lane == 0) bulk::arrive(&sm.empty_x[prev_x]), bulk::arrive(&sm.empty_a[prev_a]);
    store(ct, acc);
  }

  // acc[4j..4j+3]: fragment j (tokens 8j …) of the warp's 16 features, stored by store_fragment.
  // Groups past N are computed but not stored.
  template <int NH>
  __device__ __forceinline__ void store(const detail::MoeCtaTile& ct, const float (&acc)[NH]) const {
    const int f = ct.col0 + cw * kRowGroup;
    if (f >= a.n) return;
    const float scale = static_cast<float>(1 << kOffsetLog2) * a.out_scale[ct.expert * a.parts + f / a.part_rows];
    Tout* yt = static_cast<Tout*>(a.y) + static_cast<int64_t>(ct.row0) * a.ldy + f;
    const int nv = (ct.rows + 7) / 8;
#pragma unroll
    for (int j = 0; j < NH / 4; ++j) {
      if (j >= nv) break;
      store_fragment(yt + static_cast<int64_t>(8 * j) * a.ldy, a.ldy, ct.rows - 8 * j, acc + 4 * j, scale, lane);
    }
  }
};

template <W4Format F, typename Tout>
__global__ void __launch_bounds__(WgmmaCfg<F>::kThreads, 1)
    moe_w4_wgmma_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap code_map,
                        const __grid_constant__ CUtensorMap scale_map, GemmArgs a, int n_tiles,
                        const int32_t* __restrict__ tile_count, const int4* __restrict__ tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = WgmmaCfg<F>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const WgmmaSmem<F> sm(smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u));  // swizzle atoms: 1024-byte aligned
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp / 4;
  if (tid == 0) {
    for (int i = 0; i < C::kXStages; ++i) bulk::init(&sm.full_x[i]), bulk::init(&sm.empty_x[i], C::kGroups);
    for (int i = 0; i < C::kWStages; ++i) bulk::init(&sm.full_w[i]), bulk::init(&sm.empty_w[i], C::kGroups);
    for (int i = 0; i < C::kHalves * C::kABuffers; ++i) bulk::init(&sm.full_a[i], 128), bulk::init(&sm.empty_a[i], 4);
    bulk::fence_init();
  }
  __syncthreads();

  const int kchunks = a.k / kChunk;
  const int n_items = *tile_count * n_tiles;
  auto item_at = [&](int i, detail::MoeCtaTile& ct) {
    return detail::moe_tile_item(i, n_tiles, C::BT, C::BF, tile_count, tiles, a.offsets, ct);
  };

  // Warpgroup 0: producers (warps 0 and 1, one lane each; empty barriers start "released").
  // Warpgroups 1 and 2: the MMA warpgroups of halves 0 and 1. Warpgroups 3 and 4: the dequantising
  // warps of halves 0 and 1 (group 4·half + warp in the warpgroup). All walk the same items.
  if (wg == 0) {
    if (warp > 1 || lane != 0) return;
    RingPos pos;
    for (int i = blockIdx.x; i < n_items; i += gridDim.x) {
      detail::MoeCtaTile ct;
      if (!item_at(i, ct)) break;
      const int group0 = static_cast<int>((static_cast<int64_t>(ct.expert) * a.n + ct.col0) / kRowGroup);
      for (int c = 0; c < kchunks; ++c) {
        if (warp == 0) {
          // The item's rows in boxes of 16 (what its wgmma width reads; rows past the expert's: zeros or
          // the next expert's, never stored).
          const int boxes = (ct.rows + kWgmmaBoxRows - 1) / kWgmmaBoxRows;
          bulk::wait(&sm.empty_x[pos.stage], pos.phase ^ 1u);
          bulk::arrive_expect(&sm.full_x[pos.stage], boxes * kWgmmaBoxRows * 128);
          for (int b = 0; b < boxes; ++b) {
            bulk::copy_tile_2d(sm.x_stage(pos.stage) + b * kWgmmaBoxRows * 128, &x_map, c * kChunk,
                               ct.row0 + b * kWgmmaBoxRows, &sm.full_x[pos.stage]);
          }
          pos.next(C::kXStages);
        } else if (c % C::kWChunks == 0) {
          // kWChunks chunks of the eight groups: two boxes (past K or the bank: zeros, never stored).
          bulk::wait(&sm.empty_w[pos.stage], pos.phase ^ 1u);
          unsigned char* st = sm.w_stage(pos.stage);
          bulk::arrive_expect(&sm.full_w[pos.stage], C::kWBytes);
          bulk::copy_tile_3d(st, &code_map, 0, c, group0, &sm.full_w[pos.stage]);
          bulk::copy_tile_3d(st + C::kCodeBytes, &scale_map, 0, c, group0, &sm.full_w[pos.stage]);
          pos.next(C::kWStages);
        }
      }
    }
    return;
  }
  if (wg >= 1 + C::kHalves) {
    DequantWarp<F> dq(sm, 4 * (wg - 1 - C::kHalves) + warp % 4, lane);
    for (int i = blockIdx.x; i < n_items; i += gridDim.x) {
      detail::MoeCtaTile ct;
      if (!item_at(i, ct)) break;
      dq.item(kchunks);
    }
    return;
  }
  // The wgmma width is a template parameter of the whole item (a branch around single wgmmas would
  // make the compiler serialise them).
  MmaWarpgroup<F, Tout> mma{a, sm, wg - 1, 4 * (wg - 1) + warp % 4, lane};
  for (int i = blockIdx.x; i < n_items; i += gridDim.x) {
    detail::MoeCtaTile ct;
    if (!item_at(i, ct)) break;
    switch ((ct.rows + 15) / 16) {
      case 1: mma.template item<16>(ct, kchunks); break;
      case 2: mma.template item<32>(ct, kchunks); break;
      case 3: mma.template item<48>(ct, kchunks); break;
      case 4: mma.template item<64>(ct, kchunks); break;
      case 5: mma.template item<80>(ct, kchunks); break;
      case 6: mma.template item<96>(ct, kchunks); break;
      case 7: mma.template item<112>(ct, kchunks); break;
      default: mma.template item<128>(ct, kchunks); break;
    }
  }
#else
  __trap();  // wgmma and TMA need sm_90a
#endif
}

template <W4Format F, typename Tout>
void launch_wgmma_out(const WgmmaMaps& maps, const GemmArgs& a, const MoeTileMap& map, int multiprocessors,
                      cudaStream_t stream) {
  using C = WgmmaCfg<F>;
  const int n_tiles = (a.n + C::BF - 1) / C::BF;
  const int64_t items = static_cast<int64_t>(n_tiles) * map.bound;
  if (items > INT32_MAX) throw Error("moe_grouped_gemm_w4: too many work items");
  const int grid = static_cast<int>(std::min<int64_t>(items, multiprocessors));
  K3_CUDA_CHECK(cudaFuncSetAttribute(moe_w4_wgmma_kernel<F, Tout>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     C::kSmemBytes));
  moe_w4_wgmma_kernel<F, Tout><<<grid, C::kThreads, C::kSmemBytes, stream>>>(
      maps.x, maps.codes, maps.scales, a, n_tiles, map.count, reinterpret_cast<const int4*>(map.tiles));
  K3_CUDA_CHECK_LAUNCH("moe_w4_wgmma_kernel");
}

template <W4Format F>
void launch_wgmma(bool f32_out, const WgmmaMaps& maps, const GemmArgs& a, const MoeTileMap& map,
                  int multiprocessors, cudaStream_t stream) {
  if (f32_out) {
    launch_wgmma_out<F, float>(maps, a, map, multiprocessors, stream);
  } else {
    launch_wgmma_out<F, bf16>(maps, a, map, multiprocessors, stream);
  }
}

}  // namespace k3::cuda::w4
