// An independent float64 reference of the Kimi-Linear / Kimi-K3 text forward pass (spec
// k3-architecture.md §2–§8): plain loops over dequantized weights, one sequence, full prefill,
// token-by-token KDA recurrence, full causal MLA. Shares no code with the engine's kernels; it is
// the oracle the fast paths are tested against.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "quant/plan/plan_files.h"

namespace k3::reference {

// Returns a parameter (logical name) as float64, row-major in its inventory shape.
using WeightSource = std::function<std::vector<double>(const std::string&)>;

// The activation numerics a checkpoint format itself defines for the input of a linear weight
// (e.g. ModelSlim's int8 per-token quantisation): replaces x by the values that format multiplies.
// Empty, or a no-op for a parameter, means float activations.
using ActivationRule = std::function<void(const std::string& weight, std::vector<double>& x)>;

// The activation numerics of every weight of a plan whose format quantises its input, in plain
// float64 (docs/cpu-kernels.md): ModelSlim int8 per token (dynamic) or with the static input
// scale/offset, GGUF int8 blocks of 32 (legacy types) or 256 (k-quants) as ggml's vec_dot_type;
// float activations elsewhere.
ActivationRule format_activation_rule(const LoadPlan& plan, PlanFiles& files);

// Router (spec §7.1) over one token's logits [num_experts] and score-correction bias: scores,
// choice = score + bias, grouped top-k (a group scores the sum of its two best choices), top-k by
// choice with the lower index first on ties, weights = scores of the chosen, renormalised, times the
// routed scaling. `margin` is the smallest gap between a kept and a dropped choice (of experts and
// of groups): how far the selection is from a tie.
struct RouteRef {
  std::vector<std::pair<int64_t, double>> picked;
  double margin = INFINITY;
};
RouteRef route(const MoeConfig& m, const double* logits, const std::vector<double>& bias);

// Logits [T, vocab], row-major. With `route_margins`, also each token's smallest routing margin
// over the MoE layers (RouteRef::margin; infinity on a model without routed experts).
std::vector<double> forward(const K3Config& config, const WeightSource& weights, const std::vector<int64_t>& ids,
                            const ActivationRule& rule = {}, std::vector<double>* route_margins = nullptr);

// The blocks forward() is made of, for block-level tests. x and the result are [T][features]; the
// mixers run one sequence of T tokens from an empty state (full prefill).
using Rows = std::vector<std::vector<double>>;
Rows kda_block(const K3Config& config, const WeightSource& weights, int64_t layer, const Rows& x,
               const ActivationRule& rule = {});
Rows mla_block(const K3Config& config, const WeightSource& weights, int64_t layer, const Rows& x,
               const ActivationRule& rule = {});
// The layer's feed-forward: the MoE on MoE layers, the dense MLP elsewhere.
Rows ffn_block(const K3Config& config, const WeightSource& weights, int64_t layer, const Rows& x,
               const ActivationRule& rule = {});

}  // namespace k3::reference
