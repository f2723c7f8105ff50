// Per-sequence decode state (spec k3-architecture.md §10): what a sequence carries from one forward
// call to the next. AttnRes keeps nothing across calls (§3.5); positions are unused (NoPE).
#pragma once

#include <cstdint>
#include <vector>

namespace k3 {

// One KDA layer: the fp32 recurrent state and the short-conv window.
struct KdaLayerState {
  // [H][K][V] fp32, S[h][k][v] = S_math[k][v] of spec §6.5 (V contiguous; sglang stores [H][V][K]).
  std::vector<float> recurrent;
  // [3][W−1][P]: the last W−1 pre-conv inputs of q, k and v, oldest first (spec §10).
  std::vector<float> conv;
};

// One MLA layer: per token the row [c (kv_lora_rank) | k_pe (qk_rope_head_dim)], c already
// kv_a_layernorm-ed and k_pe raw (spec §10). fp32.
struct MlaLayerCache {
  std::vector<float> rows;  // tokens × row_width
};

struct SequenceState {
  int64_t length = 0;                 // tokens consumed so far
  std::vector<KdaLayerState> kda;     // indexed by layer; empty entries for MLA layers
  std::vector<MlaLayerCache> mla;     // indexed by layer; empty entries for KDA layers
};

}  // namespace k3
