// The 4-bit expert grouped GEMM on Hopper warpgroup MMA (W4Kernel::kWgmma, the prefill class; moe_w4.h).
// moe_w4_wgmma_nvfp4.cu and moe_w4_wgmma_mxfp4.cu instantiate it.
//
// Swapped operands as in moe_w4_gemm.cuh: D[feature][token] = Σ_k W[feature][k] · x[token][k]. A work
// item is one tile of the kM128 tile map (≤ 128 sorted rows of one expert) × 128 weight rows (eight
// 16-row groups of the bank). Persistent CTAs (one per SM, 384 threads) walk the items with a stride
// of the grid, warp-specialised:
//   - producer warp 0 (one lane): the item's activation rows, one 64-column chunk at a time, by TMA
//     (a tensor map of xs in boxes of 16 rows × 64 columns, as many boxes as the item has rows; the
//     128-byte swizzle = the wgmma B operand layout) into a ring of kXStages stages;
//   - producer warp 1 (one lane): the packed codes and block scales of the eight groups, two chunks at
//     a time, by TMA (3-D maps of the bank: two boxes per stage) into a deeper ring of kWStages stages:
//     weights come from HBM once per item, many chunks in flight;
//   - two consumer warpgroups, one group per warp, in rounds of two chunks (one weight stage): each
//     warp dequantises its code words of both (dequant(): the exact bf16 operands E2M1 · block scale ·
//     2^-7 of the mma.sync kernels), releases the weight stage and stores its 16 rows into the round's
//     pair of 128-byte-swizzled A tiles of its warpgroup in shared memory; after one warpgroup barrier
//     the warpgroup issues eight wgmma m64nNk16 with both operands in shared memory (N = the item's
//     rows rounded up to 16: rows past the expert's are multiplied but never stored), commits, and
//     releases the previous round's two activation stages once its wgmmas are done, so one round's
//     MMAs overlap the next round's dequantisation. (Rounds of one chunk, one barrier each, ran at
//     the same speed at 4096 tokens and 5–7 % slower at 2048: H200, 2026-12-02.)
//     (A straight from registers, as in the mma.sync kernels, does not work here: ptxas reuses an
//     in-flight wgmma's A registers for the next chunk's fragments — wrong results on the H200 — or,
//     when they are kept live, serialises the wgmmas.)
// Full/empty mbarrier pairs per stage; the producers run ahead across items, so an item's epilogue
// (fp32 × 2^7 · out_scale[expert, part], stored in pairs as in moe_w4_gemm.cuh) overlaps the next
// item's loads. The item count is read on the device: graph-capturable. Needs sm_90a.
#pragma once

#include <cuda.h>

#include "backend/cuda/core/smem.h"
#include "backend/cuda/core/bulk_copy.cuh"
#include "backend/cuda/moe/moe_w4_gemm.cuh"
#include "backend/cuda/core/wgmma.cuh"

namespace k3::cuda::w4 {

template <W4Format F>
struct WgmmaCfg {
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
  static constexpr int kGroups = 4 * kConsumerWarpgroups;  // 16-row groups per item, one per consumer warp
  static constexpr int BF = 16 * kGroups;                  // weight rows per item
  static constexpr int BT = 128;                           // rows of one expert per item (MoeTile::kM128)
  static_assert(BT % kWgmmaBoxRows == 0 && kWgmmaBoxRows % 8 == 0, "boxes of whole swizzle atoms");
  // A round: the two 64-column chunks of one weight stage, dequantised side by side and multiplied
  // after one warpgroup barrier (eight wgmmas per round and warpgroup).
  static constexpr int kRound = 2;
  static constexpr int kXStages = 6;  // three rounds
  static constexpr int kWStages = 6;
  static constexpr int kWChunks = kWgmmaStageChunks;  // chunks per weight stage
  static_assert(kWChunks == kRound && kXStages % kRound == 0, "a weight stage is one round");
  static constexpr int kScaleBytes = scale_bytes_per_chunk(Trait<F>::kBits);
  static constexpr int kXBytes = BT * 128;  // BT rows × 64 bf16, swizzled
  static constexpr int kCodeBytes = kGroups * kWChunks * kChunkCodeBytes;  // [group][chunk][512]
  static constexpr int kWBytes = kCodeBytes + kGroups * kWChunks * kScaleBytes;
  static_assert(2 * kWgmmaBoxGroups == kGroups && kWBytes % 128 == 0, "two weight boxes fill a stage");
  static constexpr int kABytes = 64 * 128;  // one warpgroup's 64 dequantised weight rows × 64 bf16, swizzled
  static constexpr int kABuffers = 2 * kRound;  // per consumer warpgroup: two rounds
  static constexpr int kAOffset = kXStages * kXBytes;
  static constexpr int kWOffset = kAOffset + kConsumerWarpgroups * kABuffers * kABytes;
  static constexpr int kBarOffset = kWOffset + kWStages * kWBytes;
  static constexpr int kSmemBytes = kBarOffset + 2 * (kXStages + kWStages) * 8 + 1024;  // + alignment of the base
};

// A ring position: stage index and the parity of its current phase.
struct RingPos {
  int stage = 0;
  unsigned phase = 0;
  __device__ __forceinline__ void next(int stages) {
    if (++stage == stages) stage = 0, phase ^= 1u;
  }
};

// One consumer warp's side of the kernel (warp cw of the two consumer warpgroups, group cw); the ring
// positions carry over from item to item.
template <W4Format F, typename Tout>
struct Consumer {
  using T = Trait<F>;
  using C = WgmmaCfg<F>;
  static constexpr int kSB = C::kScaleBytes;
  const GemmArgs& a;
  unsigned char* smem;
  uint64_t *full_x, *empty_x, *full_w, *empty_w;
  int cw, lane;
  RingPos xpos{}, wpos{};

  // The stage's group (slot) this warp dequantises (group cw) and where its rows go in the
  // warpgroup's A tile (rows 16·(cw % 4) + r).
  __device__ __forceinline__ int stage_group() const { return cw; }
  __device__ __forceinline__ int a_row_base() const { return kRowGroup * (cw % 4); }
  static constexpr int kRowStep = 8;  // A rows between a group's row r and r + 8

  // Item ct with the wgmma width N (≥ its rows).
  template <int N>
  __device__ __forceinline__ void item(const detail::MoeCtaTile& ct, int kchunks) {
    float acc[N / 2];
#pragma unroll
    for (int j = 0; j < N / 2; ++j) acc[j] = 0.0f;
    const int wg = cw / 4;
    unsigned char* a_tiles = smem + C::kAOffset + wg * C::kABuffers * C::kABytes;  // this warpgroup's A buffers
    int prev_x = -1;  // the previous round's first activation stage (its second follows)
    for (int c0 = 0; c0 < kchunks; c0 += C::kRound) {
      // The round's weight stage: the group's code words and block scales of both chunks; then the
      // stage goes back to its producer.
      bulk::wait(&full_w[wpos.stage], wpos.phase);
      const unsigned char* st = smem + C::kWOffset + wpos.stage * C::kWBytes;
      uint4 w[C::kRound];
      ScaleRegs<T::kScaleWords> sc[C::kRound];
#pragma unroll
      for (int p = 0; p < C::kRound; ++p) {
        const int slot = stage_group() * C::kWChunks + p;
        w[p] = *reinterpret_cast<const uint4*>(st + slot * kChunkCodeBytes + lane * 16);
        const unsigned char* sp = st + C::kCodeBytes + slot * kSB + (lane >> 2) * scale_bytes_per_lane(T::kBits);
#pragma unroll
        for (int j = 0; j < T::kScaleWords; ++j) sc[p].w[j] = reinterpret_cast<const uint32_t*>(sp)[j];
      }
      __syncwarp();
      if (lane == 0) bulk::arrive(&empty_w[wpos.stage]);
      wpos.next(C::kWStages);

      // Dequantised rows into the round's pair of A buffers, free: they were last read by the round
      // before last, whose wgmma-group (one per warpgroup, every warp's share of its MMAs) this warp's
      // wait in the last round saw complete. Then visible to the wgmma.
      unsigned char* at = a_tiles + ((c0 / C::kRound) % 2) * C::kRound * C::kABytes;
#pragma unroll
      for (int p = 0; p < C::kRound; ++p) store_a_fragments(at + p * C::kABytes, w[p], sc[p]);
      bulk::fence_proxy_async();
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");

      // Descriptors: each tile's low word once, each k16 step 32 bytes (2 in the address field) on.
      const uint32_t a_lo = wgmma::desc_k_sw128_lo(bulk::smem_addr(at));
      const int x0 = xpos.stage;
      uint32_t x_lo[C::kRound];
#pragma unroll
      for (int p = 0; p < C::kRound; ++p) {
        bulk::wait(&full_x[xpos.stage], xpos.phase);
        x_lo[p] = wgmma::desc_k_sw128_lo(bulk::smem_addr(smem + xpos.stage * C::kXBytes));
        xpos.next(C::kXStages);
      }
      wgmma::fence();
#pragma unroll
      for (int p = 0; p < C::kRound; ++p) {
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          wgmma::mma_bf16<N>(acc, wgmma::desc_k_sw128_from_lo(a_lo + (p * C::kABytes + 32 * s) / 16),
                             wgmma::desc_k_sw128_from_lo(x_lo[p] + 2 * s));
        }
      }
      wgmma::commit();
      wgmma::wait<1>();  // the previous round's wgmmas are retired: its activation stages are free
      if (prev_x >= 0 && lane == 0) {
#pragma unroll
        for (int p = 0; p < C::kRound; ++p) bulk::arrive(&empty_x[(prev_x + p) % C::kXStages]);
      }
      prev_x = x0;
    }
    wgmma::wait<0>();
#pragma unroll
    for (int j = 0; j < N / 2; ++j) wgmma::fence_operand(acc[j]);
    if (prev_x >= 0 && lane == 0) {
#pragma unroll
      for (int p = 0; p < C::kRound; ++p) bulk::arrive(&empty_x[(prev_x + p) % C::kXStages]);
    }
    store(ct, acc);
  }

  // The warp's 16 weight rows of one chunk, dequantised (dequant(): the mma fragment of each k16 step,
  // a_i = rows g + 8·(i % 2), columns 16s + 8·(i / 2) + 2t, +1), into the 128-byte-swizzled A tile.
  __device__ __forceinline__ void store_a_fragments(unsigned char* at, const uint4& w,
                                                    const ScaleRegs<T::kScaleWords>& sc) const {
    const int g = lane >> 2, t = lane & 3;
    uint32_t f[4][4];
    dequant<F, 0>(f[0], w.x, sc);
    dequant<F, 1>(f[1], w.y, sc);
    dequant<F, 2>(f[2], w.z, sc);
    dequant<F, 3>(f[3], w.w, sc);
    unsigned char* rows = at + a_row_base() * 128;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = g + kRowStep * (i & 1), chunk16 = 2 * s + (i >> 1);
        *reinterpret_cast<uint32_t*>(rows + wgmma::sw128_offset(r, chunk16) + 4 * t) = f[s][i];
      }
    }
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
      store_fragment(yt + static_cast<int64_t>(8 * j) * a.ldy, a.ldy, ct.rows - 8 * j, acc + 4 * j, scale,
                     row_weights_from(a.row_weight, ct.row0 + 8 * j), lane);
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
  unsigned char* smem = smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u);  // swizzle atoms: 1024-byte aligned
  uint64_t* full_x = reinterpret_cast<uint64_t*>(smem + C::kBarOffset);
  uint64_t* empty_x = full_x + C::kXStages;
  uint64_t* full_w = empty_x + C::kXStages;
  uint64_t* empty_w = full_w + C::kWStages;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) {
    for (int i = 0; i < C::kXStages; ++i) bulk::init(&full_x[i]), bulk::init(&empty_x[i], C::kGroups);
    for (int i = 0; i < C::kWStages; ++i) bulk::init(&full_w[i]), bulk::init(&empty_w[i], C::kGroups);
    bulk::fence_init();
  }
  __syncthreads();

  // Whole rounds: an odd K / 64's last round multiplies a chunk past K, zeros from both tensor maps.
  const int kchunks = (a.k / kChunk + C::kRound - 1) / C::kRound * C::kRound;
  const int n_items = *tile_count * n_tiles;
  auto item_at = [&](int i, detail::MoeCtaTile& ct) {
    return detail::moe_tile_item(i, n_tiles, C::BT, C::BF, tile_count, tiles, a.offsets, ct);
  };

  if (warp < 4) {  // producer warpgroup: warps 0 and 1, one lane each; empty barriers start "released"
    if (warp > 1 || lane != 0) return;
    RingPos pos;
    for (int i = blockIdx.x; i < n_items; i += gridDim.x) {
      detail::MoeCtaTile ct;
      if (!item_at(i, ct)) break;
      // The stage's two boxes of four groups: groups 0–3 and 4–7 of the item.
      const int64_t expert_row0 = static_cast<int64_t>(ct.expert) * a.n;
      const int group0 = static_cast<int>((expert_row0 + ct.col0) / kRowGroup);
      const int group1 = group0 + kWgmmaBoxGroups;
      for (int c = 0; c < kchunks; ++c) {  // kchunks: whole rounds (kernel entry)
        if (warp == 0) {
          // The item's rows in boxes of 16 (what its wgmma width reads; rows past the expert's: zeros or
          // the next expert's, never stored).
          const int boxes = (ct.rows + kWgmmaBoxRows - 1) / kWgmmaBoxRows;
          bulk::wait(&empty_x[pos.stage], pos.phase ^ 1u);
          bulk::arrive_expect(&full_x[pos.stage], boxes * kWgmmaBoxRows * 128);
          for (int b = 0; b < boxes; ++b) {
            bulk::copy_tile_2d(smem + pos.stage * C::kXBytes + b * kWgmmaBoxRows * 128, &x_map, c * kChunk,
                               ct.row0 + b * kWgmmaBoxRows, &full_x[pos.stage]);
          }
          pos.next(C::kXStages);
        } else if (c % C::kWChunks == 0) {
          // kWChunks chunks of the eight groups: two boxes (past K or the bank: zeros, never stored).
          bulk::wait(&empty_w[pos.stage], pos.phase ^ 1u);
          unsigned char* st = smem + C::kWOffset + pos.stage * C::kWBytes;
          bulk::arrive_expect(&full_w[pos.stage], C::kWBytes);
          constexpr int kHalfCodes = C::kCodeBytes / 2, kHalfScales = kWgmmaBoxGroups * C::kWChunks * C::kScaleBytes;
          bulk::copy_tile_3d(st, &code_map, 0, c, group0, &full_w[pos.stage]);
          bulk::copy_tile_3d(st + kHalfCodes, &code_map, 0, c, group1, &full_w[pos.stage]);
          bulk::copy_tile_3d(st + C::kCodeBytes, &scale_map, 0, c, group0, &full_w[pos.stage]);
          bulk::copy_tile_3d(st + C::kCodeBytes + kHalfScales, &scale_map, 0, c, group1, &full_w[pos.stage]);
          pos.next(C::kWStages);
        }
      }
    }
    return;
  }

  // Consumers: warps 4…7 and 8…11 are the two warpgroups; warp cw dequantises stage group
  // group cw (weight rows 16·cw … of the item's 128). The wgmma width is a template parameter of the whole item
  // (a branch around single wgmmas would make the compiler serialise them).
  Consumer<F, Tout> cons{a, smem, full_x, empty_x, full_w, empty_w, warp - 4, lane};
  for (int i = blockIdx.x; i < n_items; i += gridDim.x) {
    detail::MoeCtaTile ct;
    if (!item_at(i, ct)) break;
    switch ((ct.rows + 15) / 16) {
      case 1: cons.template item<16>(ct, kchunks); break;
      case 2: cons.template item<32>(ct, kchunks); break;
      case 3: cons.template item<48>(ct, kchunks); break;
      case 4: cons.template item<64>(ct, kchunks); break;
      case 5: cons.template item<80>(ct, kchunks); break;
      case 6: cons.template item<96>(ct, kchunks); break;
      case 7: cons.template item<112>(ct, kchunks); break;
      default: cons.template item<128>(ct, kchunks); break;
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
  auto* kernel = moe_w4_wgmma_kernel<F, Tout>;
  allow_dynamic_smem(kernel, C::kSmemBytes);
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(maps.x, maps.codes, maps.scales, a, n_tiles, map.count,
                                                       reinterpret_cast<const int4*>(map.tiles));
  K3_CUDA_CHECK_LAUNCH("moe_w4_wgmma_kernel");
}

template <W4Format F>
void launch_wgmma(bool f32_out, const WgmmaMaps& maps, const GemmArgs& a, const MoeTileMap& map, int multiprocessors,
                  cudaStream_t stream) {
  if (f32_out) {
    launch_wgmma_out<F, float>(maps, a, map, multiprocessors, stream);
  } else {
    launch_wgmma_out<F, bf16>(maps, a, map, multiprocessors, stream);
  }
}

}  // namespace k3::cuda::w4
