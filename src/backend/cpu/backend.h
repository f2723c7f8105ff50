// The backend interface the forward pass is written against (DESIGN.md): coarse, block-level
// operations over a batch of sequences, each backend free to fuse inside a block. Activations are
// row-major float matrices whose rows are the tokens of all sequences of one call, sequence after
// sequence; SeqSlice says which rows belong to which sequence and carries its state.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/state.h"
#include "backend/cpu/weights.h"
#include "parallel/ranks.h"

namespace k3 {

// Rows [row0, row0 + n) of a batch are the next n tokens of the sequence whose state is `state`.
struct SeqSlice {
  int64_t row0 = 0, n = 0;
  SequenceState* state = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // out[t] = table[ids[t]] (ids already validated against the vocabulary).
  virtual void embed(const Floats& table, std::span<const int64_t> ids, Tensor& out) = 0;
  // y = x · Wᵀ.
  virtual void linear(const cpu::CpuLinear& w, const Tensor& x, Tensor& y) = 0;
  // acc += x.
  virtual void add(Tensor& acc, const Tensor& x) = 0;
  // y = RMSNorm(x; w, eps) per row.
  virtual void rms_norm(const Tensor& x, const Floats& w, double eps, Tensor& y) = 0;
  // y = RMSNorm(AttnResMix(candidates; c, eps); norm_w, eps) per row (spec §3.2): candidates are
  // the bank rows then the running sum, all shaped like y.
  virtual void attn_res_mix_norm(std::span<const Tensor* const> candidates, const Floats& c, const Floats& norm_w,
                                 double eps, Tensor& y) = 0;

  // Token mixers (spec §6, §5). x is the normed input of every row; per slice the mixer continues
  // the sequence from its state in state->kda[layer] / state->mla[layer] and updates that state.
  virtual void kda(const K3Config& config, int64_t layer, const KdaWeights& w, const Tensor& x,
                   std::span<const SeqSlice> slices, Tensor& out) = 0;
  virtual void mla(const K3Config& config, int64_t layer, const MlaWeights& w, const Tensor& x,
                   std::span<const SeqSlice> slices, Tensor& out) = 0;

  // Feed-forward blocks (spec §7, §8): per token, no sequence state.
  virtual void moe(const K3Config& config, int64_t layer, const MoeWeights& w, const Tensor& x, Tensor& out) = 0;
  virtual void mlp(const K3Config& config, const MlpWeights& w, const Tensor& x, Tensor& out) = 0;
};

// `ranks` (each must outlive the backend): with `ranks.experts`, the routed experts of every MoE
// layer are divided among its ranks (backend/cpu/expert_parallel.h); with `ranks.tensor`, the
// embedding table given to embed() holds this rank's vocabulary rows of `config`'s vocabulary
// (backend/cpu/tensor_parallel.h). Every rank makes the same calls.
std::unique_ptr<Backend> make_cpu_backend(const K3Config& config, ParallelRanks ranks);
std::unique_ptr<Backend> make_cpu_backend();  // one rank

}  // namespace k3
