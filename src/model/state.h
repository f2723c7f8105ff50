// Per-sequence decode state (spec k3-architecture.md §10): what a sequence carries from one forward
// call to the next. AttnRes keeps nothing across calls (§3.5); positions are unused (NoPE).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace k3 {

// One KDA layer: the fp32 recurrent state and the short-conv window.
struct KdaLayerState {
  // [H][K][V] fp32, S[h][k][v] = S_math[k][v] of spec §6.5 (V contiguous; sglang stores [H][V][K]).
  std::vector<float> recurrent;
  // [3][W−1][P]: the last W−1 pre-conv inputs of q, k and v, oldest first (spec §10).
  std::vector<float> conv;
};

// The paged MLA latent cache every sequence of an engine shares. Block b is one page of
// `block_tokens` positions for every MLA layer: per position the row [c (kv_lora_rank) | k_pe
// (qk_rope_head_dim)], c already kv_a_layernorm-ed and k_pe raw (spec §10), fp32. A sequence's block
// table lists its pages in position order; several tables (and the prefix cache) may list the same
// full page. Pages are allocated on first use, so memory follows the blocks actually used.
class LatentPages {
 public:
  LatentPages(int64_t blocks, int64_t block_tokens, int64_t row_width, std::vector<int64_t> mla_index);

  int64_t blocks() const { return static_cast<int64_t>(pages_.size()); }
  int64_t block_tokens() const { return block_tokens_; }
  int64_t row_width() const { return row_width_; }
  uint64_t block_bytes() const;
  // The row of `layer` (a model layer index, an MLA layer) at `position` in a table.
  float* row(const std::vector<int32_t>& table, int64_t layer, int64_t position);
  const float* row(const std::vector<int32_t>& table, int64_t layer, int64_t position) const;

 private:
  float* page(int32_t block, int64_t layer) const;
  int64_t block_tokens_, row_width_, mla_layers_;
  std::vector<int64_t> mla_index_;  // model layer → index among the MLA layers (−1: a KDA layer)
  mutable std::vector<std::unique_ptr<float[]>> pages_;
};

struct SequenceState {
  int64_t length = 0;                 // tokens consumed so far
  std::vector<KdaLayerState> kda;     // indexed by layer; empty entries for MLA layers
  LatentPages* latent = nullptr;      // the MLA cache pages (null for a model without MLA layers)
  std::vector<int32_t> blocks;        // block table: pages covering at least the positions held
};

}  // namespace k3
