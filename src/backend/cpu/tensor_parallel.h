// Tensor parallelism on the CPU backend: the KDA and MLA heads, the gated MLPs' channels, the latent
// MoE projections' channels, the embedding and lm_head's vocabulary divided among the ranks of a
// Communicator (parallel/sharding.h split_range), every rank running the same forward pass over the
// same tokens with the whole hidden state.
//
// A rank keeps views of its rows of the bound weights (CpuLinear::rows_view): it reads only its
// share of every divided weight. In-process ranks view one binding; a process of its own binds the
// whole checkpoint (a mapped checkpoint is paged in only where read; repacked formats hold the whole
// matrix in each process).
//
// Every split is by output rows, so every value is computed by the same kernel over the same bytes
// as on one rank, and the ranks exchange values, never partial sums: the all-gathers below only move
// them. Logits equal the one-rank run bit for bit. Where the standard form would split the second
// linear of a pair by input columns and all-reduce partial sums (o_proj, down_proj), this one
// all-gathers the first linear's output (the heads' or channels' values), computes its rows of the
// second linear from the whole input and all-gathers the result: the same weight bytes per rank,
// more bytes exchanged (for the real K3's o_proj 1.36× those of a ring all-reduce), exact numerics.
#pragma once

#include <span>
#include <vector>

#include "backend/cpu/weights.h"
#include "core/tensor.h"
#include "parallel/communicator.h"

namespace k3::cpu {

// The config the blocks of TP rank `rank` of `ranks` run with: its share of the KDA and MLA heads;
// every other field as given. The per-sequence KDA state it keeps is that of those heads.
K3Config tensor_parallel_config(const K3Config& config, int64_t ranks, int64_t rank);

// Replaces the weights of `w` (bound whole for `config`) by this rank's share:
//   KDA: q, k, v, f_b, g (or g_b), conv, dt_bias by its heads' channels, b and A_log by its heads;
//        f_a, g_a and o_norm whole; o_proj gathers the heads' outputs, then rows by hidden channel;
//   MLA: q_b (or q), kv_b, the absorbed matrices and g by its heads; q_a, kv_a and the norms whole
//        (every rank appends the whole latent row to its own cache); o_proj as KDA's;
//   dense MLP and shared experts: gate and up by intermediate channel, down gathers them first;
//   latent MoE: down and up projections by output channel, outputs gathered (the routed experts see
//        the whole latent row); the router and latent norm whole; routed experts untouched (EP);
//   embedding and lm_head by vocabulary (the lm_head's logits stay divided: gather_columns puts
//        them together, argmax_vocab_split picks from them as they are).
void shard_tensor_parallel(const K3Config& config, ModelWeights& w, Communicator& ranks);

// out[t] = the embedding row of ids[t] from a table holding this rank's vocabulary rows
// (split_range(vocab, ranks, rank)): each rank sends the rows it holds; exact.
void embed_vocab_split(Communicator& ranks, const Floats& table_rows, int64_t vocab, std::span<const int64_t> ids,
                       Tensor& out);

// Columns divided among the ranks in groups of `unit` (rank r holds the groups
// split_range(full_cols / unit, ranks, r) of every row: its heads' values, unit = head width) put
// back together on every rank, [rows, full_cols].
Tensor gather_columns(Communicator& ranks, const Tensor& local, int64_t full_cols, int64_t unit = 1);
// The same from `rows` rows of `local_cols` values at `local` into `out` ([rows, full_cols]).
void gather_columns(Communicator& ranks, const float* local, int64_t rows, int64_t local_cols, int64_t full_cols,
                    int64_t unit, float* out);

// The greedy pick of each row of vocabulary-divided logits (executor.h argmax_rows' rule: largest,
// lowest id on ties, −1 for a row holding a NaN or an infinity), exchanging one candidate per rank
// and row rather than the rows.
std::vector<int64_t> argmax_vocab_split(Communicator& ranks, const Tensor& local, int64_t vocab);

}  // namespace k3::cpu
