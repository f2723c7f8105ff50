// The order of the blocks of one forward pass (spec §2.2–§2.3, §3), written once for every backend:
// embedding rows in, the final normed rows out. A backend supplies an `Ops` object that owns its
// weights and the call's sequences and provides
//   typename Ops::Act                       an activation [rows, hidden] (default-constructible, movable;
//                                           a moved-from Act no longer aliases the moved one)
//   norm(Site, layer, x, y)                 y = RMSNorm(x) with the site's norm weight
//   mix_norm(Site, layer, candidates, y)    y = RMSNorm(AttnResMix(candidates)) with the site's score
//                                           vector and norm weight; candidates: const Act*, bank then run
//   mixer(layer, x, out)                    the layer's token mixer (KDA or MLA) on the normed rows
//   ffn(layer, x, out)                      the layer's MoE or dense MLP
//   add(acc, x)                             acc += x
// Outputs may be passed in empty or holding an earlier value; the Ops (re)shape them.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace k3 {

// Where a norm (and, with AttnRes, its mix) sits: before the mixer, before the FFN, before lm_head.
enum class NormSite : uint8_t { kInput, kPostAttention, kFinal };

namespace block_order_detail {

template <class Act>
std::vector<const Act*> candidates(const std::vector<Act>& bank, const Act& run) {
  std::vector<const Act*> cand;
  for (const Act& b : bank) cand.push_back(&b);
  cand.push_back(&run);
  return cand;
}

// Plain pre-norm residual (spec §2.3).
template <class Ops>
void plain_residual(const K3Config& c, Ops& ops, typename Ops::Act x, typename Ops::Act& normed) {
  typename Ops::Act h, out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    ops.norm(NormSite::kInput, l, x, h);
    ops.mixer(l, h, out);
    ops.add(x, out);
    ops.norm(NormSite::kPostAttention, l, x, h);
    ops.ffn(l, h, out);
    ops.add(x, out);
  }
  ops.norm(NormSite::kFinal, -1, x, normed);
}

// Attention residuals (spec §2.2, §3): blocks sealed at layers 0, B, 2B, …
template <class Ops>
void attn_res(const K3Config& c, Ops& ops, typename Ops::Act x, typename Ops::Act& normed) {
  using Act = typename Ops::Act;
  const int64_t block = *c.attn_res_block_size;
  std::vector<Act> bank;
  Act run = std::move(x), h, out;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (bank.empty()) {
      ops.norm(NormSite::kInput, l, run, h);
    } else {
      ops.mix_norm(NormSite::kInput, l, candidates(bank, run), h);
    }
    const bool seal = l % block == 0;
    if (seal) bank.push_back(std::move(run));
    ops.mixer(l, h, out);
    if (seal) {
      run = std::move(out);
    } else {
      ops.add(run, out);
    }
    ops.mix_norm(NormSite::kPostAttention, l, candidates(bank, run), h);
    ops.ffn(l, h, out);
    ops.add(run, out);
  }
  ops.mix_norm(NormSite::kFinal, -1, candidates(bank, run), normed);
}

}  // namespace block_order_detail

// The final normed rows of `x` (the embedded tokens) after every layer.
template <class Ops>
void run_blocks(const K3Config& c, Ops& ops, typename Ops::Act x, typename Ops::Act& normed) {
  if (c.attn_res_block_size) {
    block_order_detail::attn_res(c, ops, std::move(x), normed);
  } else {
    block_order_detail::plain_residual(c, ops, std::move(x), normed);
  }
}

}  // namespace k3
