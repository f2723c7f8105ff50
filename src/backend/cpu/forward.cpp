#include "backend/cpu/forward.h"

#include "backend/cpu/cpu_linear.h"
#include "core/error.h"
#include "model/block_order.h"

namespace k3 {
namespace {

// The block order's Ops over the virtual CPU-style Backend and the bound ModelWeights.
class BackendOps {
 public:
  using Act = Tensor;

  BackendOps(const K3Config& c, const ModelWeights& w, Backend& be, std::span<const SeqSlice> slices)
      : c_(c), w_(w), be_(be), slices_(slices) {}

  void norm(NormSite site, int64_t l, const Tensor& x, Tensor& y) { be_.rms_norm(x, norm_weight(site, l), c_.rms_norm_eps, y); }
  void mix_norm(NormSite site, int64_t l, const std::vector<const Tensor*>& cand, Tensor& y) {
    be_.attn_res_mix_norm(cand, res_score(site, l), norm_weight(site, l), c_.rms_norm_eps, y);
  }
  void mixer(int64_t l, const Tensor& x, Tensor& out) {
    const LayerWeights& lw = layer(l);
    if (c_.is_kda(l)) {
      be_.kda(c_, l, lw.kda, x, slices_, out);
    } else {
      be_.mla(c_, l, lw.mla, x, slices_, out);
    }
  }
  void ffn(int64_t l, const Tensor& x, Tensor& out) {
    const LayerWeights& lw = layer(l);
    if (c_.is_moe(l)) {
      be_.moe(c_, l, lw.moe, x, out);
    } else {
      be_.mlp(c_, lw.mlp, x, out);
    }
  }
  void add(Tensor& acc, const Tensor& x) { be_.add(acc, x); }

 private:
  const LayerWeights& layer(int64_t l) const { return w_.layers[static_cast<size_t>(l)]; }
  const Floats& norm_weight(NormSite site, int64_t l) const {
    switch (site) {
      case NormSite::kInput: return layer(l).input_norm;
      case NormSite::kPostAttention: return layer(l).post_attention_norm;
      case NormSite::kFinal: break;
    }
    return w_.final_norm;
  }
  const Floats& res_score(NormSite site, int64_t l) const {
    switch (site) {
      case NormSite::kInput: return layer(l).attn_res_c;
      case NormSite::kPostAttention: return layer(l).mlp_res_c;
      case NormSite::kFinal: break;
    }
    return w_.output_res_c;
  }

  const K3Config& c_;
  const ModelWeights& w_;
  Backend& be_;
  std::span<const SeqSlice> slices_;
};

}  // namespace

SequenceState new_sequence_state(const K3Config& config, LatentPages* latent) {
  SequenceState s;
  s.kda.resize(static_cast<size_t>(config.num_layers));
  s.latent = latent;
  return s;
}

namespace {

// One forward call whose linears all take `path`.
Tensor forward_pass(const K3Config& c, const ModelWeights& w, Backend& be, std::span<const int64_t> ids,
                    std::span<const SeqSlice> slices, std::span<const int64_t> logit_rows, cpu::LinearPath path) {
  const cpu::ScopedLinearPath scoped(path);
  const int64_t T = static_cast<int64_t>(ids.size());
  Tensor x(T, c.hidden_size), normed;
  be.embed(w.embed, ids, x);
  BackendOps ops(c, w, be, slices);
  run_blocks(c, ops, std::move(x), normed);
  for (const SeqSlice& s : slices) s.state->length += s.n;
  Tensor picked(static_cast<int64_t>(logit_rows.size()), c.hidden_size), logits;
  for (size_t i = 0; i < logit_rows.size(); ++i) {
    std::copy_n(normed.row(logit_rows[i]), c.hidden_size, picked.row(static_cast<int64_t>(i)));
  }
  be.linear(*w.lm_head, picked, logits);
  return logits;
}

}  // namespace

Tensor forward(const K3Config& c, const ModelWeights& w, Backend& be, std::span<const int64_t> ids,
               std::span<const SeqSlice> slices, std::span<const int64_t> logit_rows) {
  const int64_t T = static_cast<int64_t>(ids.size());
  int64_t covered = 0;
  bool decode = false, prefill = false;
  for (const SeqSlice& s : slices) {
    if (s.row0 != covered || s.n < 1 || s.state == nullptr || s.state->kda.size() != static_cast<size_t>(c.num_layers)) {
      throw Error("forward: slices must cover the batch rows in order, each with n ≥ 1 and a sized state");
    }
    covered += s.n;
    (s.n == 1 ? decode : prefill) = true;
  }
  if (covered != T) throw Error("forward: slices cover " + std::to_string(covered) + " of " + std::to_string(T) + " rows");
  if (!(decode && prefill)) return forward_pass(c, w, be, ids, slices, logit_rows, prefill ? cpu::LinearPath::kTiles : cpu::LinearPath::kFused);
  // Both kinds: one pass each, the logits put back in logit_rows order.
  struct Pass {
    std::vector<int64_t> ids, logit_rows;
    std::vector<SeqSlice> slices;
    std::vector<int64_t> local_row;  // batch row → row in this pass (−1: not in it)
  } passes[2];  // [0] one-token slices, [1] the others
  for (Pass& p : passes) p.local_row.assign(static_cast<size_t>(T), -1);
  for (const SeqSlice& s : slices) {
    Pass& p = passes[s.n == 1 ? 0 : 1];
    const int64_t row0 = static_cast<int64_t>(p.ids.size());
    for (int64_t r = 0; r < s.n; ++r) p.local_row[static_cast<size_t>(s.row0 + r)] = row0 + r;
    p.ids.insert(p.ids.end(), ids.begin() + s.row0, ids.begin() + s.row0 + s.n);
    p.slices.push_back({row0, s.n, s.state});
  }
  for (int64_t row : logit_rows) {
    for (Pass& p : passes) {
      if (p.local_row[static_cast<size_t>(row)] >= 0) p.logit_rows.push_back(p.local_row[static_cast<size_t>(row)]);
    }
  }
  const Tensor decoded = forward_pass(c, w, be, passes[0].ids, passes[0].slices, passes[0].logit_rows, cpu::LinearPath::kFused);
  const Tensor prefilled = forward_pass(c, w, be, passes[1].ids, passes[1].slices, passes[1].logit_rows, cpu::LinearPath::kTiles);
  Tensor logits(static_cast<int64_t>(logit_rows.size()), decoded.cols);
  int64_t next[2] = {0, 0};
  for (size_t i = 0; i < logit_rows.size(); ++i) {
    const int which = passes[0].local_row[static_cast<size_t>(logit_rows[i])] >= 0 ? 0 : 1;
    const Tensor& from = which == 0 ? decoded : prefilled;
    std::copy_n(from.row(next[which]++), from.cols, logits.row(static_cast<int64_t>(i)));
  }
  return logits;
}

}  // namespace k3
