// Skewed routing for synthetic weights (`k3 bench --synthetic … --routing uniform|zipf:S`): real
// traffic picks some experts far more often than others, which changes how many distinct experts a
// decode step reads and how evenly expert-parallel ranks are loaded. The synthetic router's weights
// are random, so its picks are near uniform; a skew is imposed through the selection-only correction
// bias (spec §7.1), fitted so that the router picks expert e in a share of tokens that follows
// Zipf's law over the experts' popularity order.
//
// The model of the synthetic router the fit assumes: logits independent N(0, 1) per expert (unit-RMS
// normed rows times router rows of variance 1/K), sigmoid scores, one expert group, top-k of score +
// bias. [Assumption: real router logits are correlated across experts and tokens; the fitted bias
// gives the target shares only under this model.]
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"

namespace k3 {

struct RoutingSkew {
  double zipf = 0;  // Zipf exponent S; 0: uniform (no bias)
  std::string text() const;  // "uniform" or "zipf:S"
};

// "uniform" or "zipf:S" with 0 < S ≤ kMaxZipf. Throws k3::Error (field '--routing') otherwise.
inline constexpr double kMaxZipf = 4.0;
RoutingSkew parse_routing_skew(const std::string& text);

// Throws k3::Error (field '--routing', naming `model`) when `skew` is not uniform and `config` has no
// routed experts or more than one expert group (the fit's router model has one).
void check_routing_skew(const K3Config& config, const RoutingSkew& skew, const std::string& model);

// The share of tokens that picks each expert (popularity order: expert 0 the hottest): k · p_e with
// p_e ∝ (e + 1)^−S, no share above 1 (a token picks an expert at most once; the excess is spread
// over the others in proportion). They sum to k. Uniform: k / E each.
std::vector<double> target_pick_shares(int64_t experts, int64_t top_k, const RoutingSkew& skew);

// The share of `tokens` simulated tokens (seeded) that picks each expert under `bias`.
std::vector<double> simulated_pick_shares(std::span<const float> bias, int64_t top_k, int64_t tokens, uint64_t seed);

// A correction bias under which the simulated router's pick shares approach target_pick_shares,
// fitted by the aux-loss-free balancing update (each expert's bias moves by its share's shortfall)
// run towards the skew; all zero for uniform. Expert 0 the hottest.
std::vector<float> skewed_correction_bias(int64_t experts, int64_t top_k, const RoutingSkew& skew, uint64_t seed);

// The expected number of distinct experts a step of `batch` tokens reads, each expert picked by a
// token with probability shares[e] independently: Σ 1 − (1 − shares[e])^batch.
double distinct_experts_per_step(std::span<const double> shares, int64_t batch);

}  // namespace k3
