// The GGUF experts' prefill kernel (moe_ggml.h: moe_grouped_gemm_ggml): the mma.sync grouped GEMM of
// moe_grouped_gemm.cuh with its weight tiles decoded from the bank's GGML blocks by the CTA's threads
// — each thread 8 consecutive elements of a row per pass, F::decode8 (ggml's float operations, bit
// for bit) rounded to bf16, stored into the stage's shared tile — so the weights stay packed in memory
// and each packed byte is read once per m-tile. moe_ggml_mma_<type>.cu instantiate it. (Per-element
// F::value calls here ran 3–12× slower: every element reloaded its block's scales; H200, 2026-12-02.)
#pragma once

#include "backend/cuda/core/kernel_util.cuh"
#include "quant/formats/ggml/cuda/moe_ggml_blocks.h"
#include "quant/formats/ggml/cuda/moe_ggml_mma.h"
#include "backend/cuda/moe/moe_grouped_gemm.cuh"

namespace k3::cuda::ggml_mma {

namespace gb = ggml_blocks;
using namespace grouped_gemm;

// Weight source of moe_gemm_kernel: bank rows of GGML blocks of trait F, row_bytes apart.
template <class F>
struct GgmlBank {
  static constexpr bool kAsync = false;  // decoded by the threads (plain shared stores)
  const uint8_t* w;
  int64_t row_bytes;

  // Bank row `row` (and the rows kRowStep, 2·kRowStep, … after it where `rows` has their bit),
  // elements col … col + 7 (within one block: blocks are 32 or 256 wide), as bf16 into dst; zeros
  // where !in_k or a row is missing.
  template <class C>
  __device__ __forceinline__ void load(bf16* dst, int64_t row, int col, bool in_k, uint32_t rows) const {
    const uint8_t* blk = w + row * row_bytes + static_cast<int64_t>(col / F::kBlock) * F::kBytes;
    const int e0 = col % F::kBlock;
#pragma unroll
    for (int i = 0; i < C::BN / C::kRowStep; ++i) {
      float v[8] = {};
      if (in_k && (rows >> i & 1u)) {
        const uint8_t* b = blk + i * C::kRowStep * row_bytes;
        F::decode8(b, e0, v);
      }
      detail::store8(dst + i * C::kRowStep * C::LDS, v);
    }
  }

  // The cache lines load() will read for the same rows and `col` (the first and last byte of each
  // row's block) into L1, a stage ahead of the decode.
  template <class C>
  __device__ __forceinline__ void prefetch(int64_t row, int col, bool in_k, uint32_t rows) const {
    const uint8_t* blk = w + row * row_bytes + static_cast<int64_t>(col / F::kBlock) * F::kBytes;
#pragma unroll
    for (int i = 0; i < C::BN / C::kRowStep; ++i) {
      if (in_k && (rows >> i & 1u)) {
        const uint8_t* b = blk + i * C::kRowStep * row_bytes;
        asm volatile("prefetch.global.L1 [%0];\n" ::"l"(b));
        asm volatile("prefetch.global.L1 [%0];\n" ::"l"(b + F::kBytes - 1));
      }
    }
  }
};

// kM64 with eight warps per CTA (the bf16 source's tiles have four): twice the warps per SM to cover
// the decode's global-load latency, each decoding half as many rows per stage. (kM128 at eight warps
// and two CTAs per SM spills 340+ bytes at the 128-register cap; it keeps four.)
using GgmlCfgM64 = TileCfg<64, 128, 64, 2, 4, 3, 2>;

template <GgmlType T>
void launch(MoeTile tile, bool f32_out, const Args& a, const MoeTileMap& map, cudaStream_t stream) {
  gb::visit(T, [&](auto trait) {
    using F = decltype(trait);
    if constexpr (F::kType == T) {
      const GemmArgs<GgmlBank<F>> g{static_cast<const bf16*>(a.x), a.ldx, {a.w, a.row_bytes}, a.y, a.ldy, a.n, a.k, 0,
                                    a.offsets, nullptr, nullptr, a.row_weight};
      constexpr const char* kWhat = "moe_grouped_gemm_ggml";
      auto run = [&](auto out) {
        using Tout = decltype(out);
        if (tile == MoeTile::kM128) {
          grouped_gemm::launch<CfgM128, Tout>(g, map, stream, kWhat);
        } else {
          grouped_gemm::launch<GgmlCfgM64, Tout>(g, map, stream, kWhat);
        }
      };
      if (f32_out) {
        run(float{});
      } else {
        run(bf16{});
      }
    }
  });
}

}  // namespace k3::cuda::ggml_mma
