// What the two MLA decode kernels share (mla_decode.cu: the mma.sync kernel, the combine and the
// choice between them; mla_decode_wgmma.cu: the wgmma kernel). .cu files only.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

namespace k3::cuda::mla_detail {

struct DecodeArgs {
  const __nv_bfloat16* q; int64_t ldq;
  const __nv_bfloat16* cache;
  int page_size;
  const int32_t* block_table; int64_t bt_ld;
  const int32_t* seqlens;
  int heads, splits;
  float scale_log2;
  float* out; int64_t ldo;  // final o_lat when splits == 1
  float* part;              // [B][splits][H][512]
  float* lse;               // [B][splits][H]
};

// Heads per CTA of the wgmma kernel (its N: 32 or 48) and CTAs per sequence and split for H heads.
int wgmma_heads_per_cta(int heads);
inline int wgmma_head_groups(int heads) { return (heads + wgmma_heads_per_cta(heads) - 1) / wgmma_heads_per_cta(heads); }

// cache_map: the cache rows [num_rows, 576] in boxes of 64 rows × 64 columns, 128-byte swizzle.
void launch_mla_decode_wgmma(const DecodeArgs& a, const CUtensorMap& cache_map, int batch, cudaStream_t stream);

}  // namespace k3::cuda::mla_detail
