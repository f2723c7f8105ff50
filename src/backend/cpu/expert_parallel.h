// Expert parallelism on the CPU backend: the routed experts of every MoE layer divided among the
// ranks of a Communicator (parallel/sharding.h split_range), every rank running the same forward
// pass over the same tokens (attention and the rest replicated).
//
// Per MoE layer: rank r owns the tokens [r·T/n, (r+1)·T/n) of the call for the exchange. It sends
// each of its tokens' latent rows to the ranks owning the token's picked experts (all-to-all),
// computes its experts on the rows it receives, sends the outputs back (all-to-all), and adds them
// to its tokens' routed sums in ascending expert order — the order of the one-rank loop, so the
// sums have the same bits. An all-gather then gives every rank every token's routed sum; the
// latent norm, up-projection and shared experts run replicated after it. An expert's rows are
// the same rows as on one rank in another order, and the CPU linears compute each row
// independently of the others (cpu_linear.h), so logits equal the one-rank run bit for bit. Each
// rank binds only its own experts (bind_weights' expert range), so the routed experts' memory is
// divided among the ranks.
#pragma once

#include "backend/cpu/block_ops.h"
#include "parallel/communicator.h"
#include "parallel/expert_placement.h"

namespace k3::cpu {

// routed += Σ weight · expert(z) over every token's picks of MoE layer `layer`, the experts spread
// over `ranks` as `placement` says (a pick goes to placement.holder).
void routed_experts_across(const K3Config& config, int64_t layer, const MoeWeights& w, const Tensor& z,
                           const Routing& routing, Tensor& routed, Communicator& ranks, const ExpertPlacement& placement);

}  // namespace k3::cpu
