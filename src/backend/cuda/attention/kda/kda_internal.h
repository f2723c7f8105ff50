// Private to the KDA kernels (kda_*.cu): the prefill workspace layout shared by the intra-chunk
// kernel and the inter-chunk kernel, and their launchers. Host-only header.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/attention/kda/kda.h"

namespace k3::cuda::kda_detail {

inline constexpr int D = kKdaHeadDim;
inline constexpr int C = kKdaChunk;

// Per (chunk slot, head), fp32, in this order (all offsets multiples of 16 bytes):
//   Wt  [D][C]  W = Tm·(k⊙e^G) transposed            (spec §6.6)
//   U   [C][D]  U = Tm·v
//   Qgt [D][C]  (q⊙e^G) transposed
//   Kd  [C][D]  k ⊙ e^{G_C − G}
//   Aqkt[C][C]  Aqk transposed: Aqkt[j][i] = ⟨q_i ⊙ e^{G_i−G_j}, k_j⟩ for j ≤ i, else 0
//   gC  [D]     e^{G_C}
// Chunk c of sequence s uses slot cu[s]/C + s + c: distinct for all (s, c) and < rows/C + n + 1.
inline constexpr size_t kOffWt = 0;
inline constexpr size_t kOffU = kOffWt + D * C;
inline constexpr size_t kOffQgt = kOffU + C * D;
inline constexpr size_t kOffKd = kOffQgt + D * C;
inline constexpr size_t kOffAqkt = kOffKd + C * D;
inline constexpr size_t kOffGc = kOffAqkt + C * C;
inline constexpr size_t kFloatsPerChunkHead = kOffGc + D;

inline int64_t chunk_slots(const KdaBatch& b) { return b.total_rows / C + b.n + 1; }

struct PrefillArgs {
  KdaBatch batch;
  const void* q; int64_t ldq;
  const void* k; int64_t ldk;
  const void* v; int64_t ldv;
  const void* f; int64_t ldf;
  const void* b; int64_t ldb;
  KdaGate gate;
  float q_scale;
  int heads;
  float* state;  // pool.recurrent
  float* ws;
  void* o; int64_t ldo;
};

// Launchers (kda_chunk_intra.cu, kda_chunk_inter.cu). in_bf16: q, k, v, f and b are bf16 (else
// f32); out_bf16 likewise for o. cols: state columns per CTA, 16 or 32.
void launch_chunk_intra(const PrefillArgs& a, bool in_bf16, cudaStream_t stream);
void launch_chunk_inter(const PrefillArgs& a, bool out_bf16, bool bulk_copy, int cols, cudaStream_t stream);

}  // namespace k3::cuda::kda_detail
