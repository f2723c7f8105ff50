#include "model/forward.h"

#include "core/error.h"

namespace k3 {
namespace {

void mixer(const K3Config& c, const ModelWeights& w, Backend& be, int64_t l, const Tensor& x,
           std::span<const SeqSlice> slices, Tensor& out) {
  const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
  if (c.is_kda(l)) {
    be.kda(c, l, lw.kda, x, slices, out);
  } else {
    be.mla(c, l, lw.mla, x, slices, out);
  }
}

void ffn(const K3Config& c, const ModelWeights& w, Backend& be, int64_t l, const Tensor& x, Tensor& out) {
  const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
  if (c.is_moe(l)) {
    be.moe(c, lw.moe, x, out);
  } else {
    be.mlp(c, lw.mlp, x, out);
  }
}

// AttnRes candidates: the sealed block rows, then the running sum (spec §3.2).
std::vector<const Tensor*> candidates(const std::vector<Tensor>& bank, const Tensor& run) {
  std::vector<const Tensor*> cand;
  for (const Tensor& b : bank) cand.push_back(&b);
  cand.push_back(&run);
  return cand;
}

// The input of the final norm, already normed: plain pre-norm residual (spec §2.3).
void plain_residual(const K3Config& c, const ModelWeights& w, Backend& be, Tensor x, std::span<const SeqSlice> slices,
                    Tensor& normed) {
  const double eps = c.rms_norm_eps;
  Tensor h, out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    be.rms_norm(x, lw.input_norm, eps, h);
    mixer(c, w, be, l, h, slices, out);
    be.add(x, out);
    be.rms_norm(x, lw.post_attention_norm, eps, h);
    ffn(c, w, be, l, h, out);
    be.add(x, out);
  }
  be.rms_norm(x, w.final_norm, eps, normed);
}

// Attention residuals (spec §2.2, §3): blocks sealed at layers 0, B, 2B, …
void attn_res(const K3Config& c, const ModelWeights& w, Backend& be, Tensor x, std::span<const SeqSlice> slices,
              Tensor& normed) {
  const double eps = c.rms_norm_eps;
  const int64_t block = *c.attn_res_block_size;
  std::vector<Tensor> bank;
  Tensor run = std::move(x), h, out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    if (bank.empty()) {
      be.rms_norm(run, lw.input_norm, eps, h);
    } else {
      be.attn_res_mix_norm(candidates(bank, run), lw.attn_res_c, lw.input_norm, eps, h);
    }
    const bool seal = l % block == 0;
    if (seal) bank.push_back(std::move(run));
    mixer(c, w, be, l, h, slices, out);
    if (seal) {
      run = std::move(out);
    } else {
      be.add(run, out);
    }
    be.attn_res_mix_norm(candidates(bank, run), lw.mlp_res_c, lw.post_attention_norm, eps, h);
    ffn(c, w, be, l, h, out);
    be.add(run, out);
  }
  be.attn_res_mix_norm(candidates(bank, run), w.output_res_c, w.final_norm, eps, normed);
}

}  // namespace

SequenceState new_sequence_state(const K3Config& config) {
  SequenceState s;
  s.kda.resize(static_cast<size_t>(config.num_layers));
  s.mla.resize(static_cast<size_t>(config.num_layers));
  return s;
}

Tensor forward(const K3Config& c, const ModelWeights& w, Backend& be, std::span<const int64_t> ids,
               std::span<const SeqSlice> slices, std::span<const int64_t> logit_rows) {
  const int64_t T = static_cast<int64_t>(ids.size());
  int64_t covered = 0;
  for (const SeqSlice& s : slices) {
    if (s.row0 != covered || s.n < 1 || s.state == nullptr || s.state->kda.size() != static_cast<size_t>(c.num_layers)) {
      throw Error("forward: slices must cover the batch rows in order, each with n ≥ 1 and a sized state");
    }
    covered += s.n;
  }
  if (covered != T) throw Error("forward: slices cover " + std::to_string(covered) + " of " + std::to_string(T) + " rows");
  Tensor x(T, c.hidden_size), normed;
  be.embed(w.embed, ids, x);
  if (c.attn_res_block_size) {
    attn_res(c, w, be, std::move(x), slices, normed);
  } else {
    plain_residual(c, w, be, std::move(x), slices, normed);
  }
  for (const SeqSlice& s : slices) s.state->length += s.n;
  Tensor picked(static_cast<int64_t>(logit_rows.size()), c.hidden_size), logits;
  for (size_t i = 0; i < logit_rows.size(); ++i) {
    std::copy_n(normed.row(logit_rows[i]), c.hidden_size, picked.row(static_cast<int64_t>(i)));
  }
  be.linear(*w.lm_head, picked, logits);
  return logits;
}

}  // namespace k3
