// The KDA delta-rule core for one head (spec §6.5, §6.6), fp32. Inputs are per-token rows of D
// values: q (L2-normed and already scaled by D^-½), k (L2-normed), v, g (per-channel log decay,
// ≤ 0), and β per token. The state S is [D_k][D_v] (V contiguous), updated in place; o is [T][D].
// Both forms compute the same function; the chunked one is the prefill path, the recurrent one
// the decode path.
#pragma once

#include <cstdint>

namespace k3::cpu {

inline constexpr int64_t kKdaChunk = 64;  // chunk length of the prefill form (spec §6.6)

struct KdaHeadInputs {
  int64_t tokens = 0, dim = 0;
  const float* q = nullptr;     // [T][D]
  const float* k = nullptr;     // [T][D]
  const float* v = nullptr;     // [T][D]
  const float* g = nullptr;     // [T][D]
  const float* beta = nullptr;  // [T]
};

// Token by token: S ← diag(e^g) S; u = β (v − Sᵀk); S ← S + k uᵀ; o = Sᵀ q.
void kda_head_recurrent(const KdaHeadInputs& in, float* state, float* out);
// Chunks of `chunk` tokens in the WY form of spec §6.6; decays are exp of differences of the
// in-chunk cumulative log decay, never ratios of exponentials.
void kda_head_chunked(const KdaHeadInputs& in, float* state, float* out, int64_t chunk = kKdaChunk);

}  // namespace k3::cpu
