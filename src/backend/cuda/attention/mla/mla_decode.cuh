// What the two MLA decode kernels share (mla_decode.cu: the mma.sync kernel, the range layout, the
// combine and the choice between the kernels; mla_decode_wgmma.cu: the wgmma kernel). .cu files only.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

namespace k3::cuda::mla_detail {

// The ranges of one decode call (MlaDecodeSchedule), laid out on the GPU by the schedule kernel
// (mla_decode_ranges.h: the layouts). The sequences' 64-token tiles are numbered end to end: sequence
// b holds [seq_begin[b], seq_begin[b + 1]). Range c covers [cta_begin[c], cta_begin[c + 1]). A range's
// piece of one sequence is a segment: a segment that is the whole sequence writes the output itself;
// any other writes its partial O and log2-sum-exp to slot c + b, and the combine merges sequence b's
// slots over the ranges first_cta[b]…last_cta[b], every one of which holds tiles of b. Slots are
// unique: walking the segments in order steps c, b or both by one.
struct DecodeWork {
  int32_t* seq_begin;  // [B + 1]
  int32_t* cta_begin;  // [ranges + 1]
  int32_t* cta_seq;    // [ranges]: the sequence holding the range's first tile
  int32_t* first_cta;  // [B]
  int32_t* last_cta;   // [B]
};

struct DecodeArgs {
  const __nv_bfloat16* q; int64_t ldq;
  const __nv_bfloat16* cache;
  int page_size;
  const int32_t* block_table; int64_t bt_ld;
  const int32_t* seqlens;
  int heads;
  float scale_log2;
  float* out; int64_t ldo;  // o_lat, written by whole-sequence segments and by the combine
  float* part;              // [slots][H][512]: the partial O of a segment, slot c + b
  float* lse;               // [slots][H]
  DecodeWork work;
};

// Heads per CTA of the wgmma kernel (its N: 32 or 48) and CTAs per range for H heads.
int wgmma_heads_per_cta(int heads);
inline int wgmma_head_groups(int heads) { return (heads + wgmma_heads_per_cta(heads) - 1) / wgmma_heads_per_cta(heads); }

// cache_map: the cache rows [num_rows, 576] in boxes of 64 rows × 64 columns, 128-byte swizzle.
// One CTA per (head group, range); chained: a programmatic dependent of the schedule kernel.
void launch_mla_decode_wgmma(const DecodeArgs& a, const CUtensorMap& cache_map, int ranges, bool chained,
                             cudaStream_t stream);

}  // namespace k3::cuda::mla_detail
