#include "model/routing_skew.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "core/error.h"

namespace k3 {
namespace {

// Fit settings: enough tokens that a share's sampling error (≈ √(s/T)) stays below the tolerance of
// the fit, a step that halves as the fit settles.
constexpr int64_t kFitTokens = 4096;
constexpr int kFitRounds = 200;
constexpr double kFitTolerance = 0.005;

// Per-token sigmoid scores of N(0, 1) logits of `experts` experts, row-major [tokens, experts].
std::vector<float> simulated_scores(int64_t experts, int64_t tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> scores(static_cast<size_t>(experts * tokens));
  for (float& s : scores) s = 1.0f / (1.0f + std::exp(-normal(rng)));
  return scores;
}

// Shares of the tokens of `scores` that pick each expert under `bias`.
std::vector<double> pick_shares(const std::vector<float>& scores, std::span<const float> bias, int64_t top_k) {
  const int64_t experts = static_cast<int64_t>(bias.size()), tokens = static_cast<int64_t>(scores.size()) / experts;
  std::vector<double> shares(bias.size(), 0.0);
  std::vector<int32_t> order(bias.size());
  std::vector<float> key(bias.size());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < experts; ++e) key[static_cast<size_t>(e)] = scores[static_cast<size_t>(t * experts + e)] + bias[static_cast<size_t>(e)];
    std::iota(order.begin(), order.end(), 0);
    std::nth_element(order.begin(), order.begin() + top_k - 1, order.end(), [&](int32_t a, int32_t b) {
      return key[static_cast<size_t>(a)] > key[static_cast<size_t>(b)] || (key[static_cast<size_t>(a)] == key[static_cast<size_t>(b)] && a < b);
    });
    for (int64_t j = 0; j < top_k; ++j) shares[static_cast<size_t>(order[static_cast<size_t>(j)])] += 1.0;
  }
  for (double& s : shares) s /= static_cast<double>(tokens);
  return shares;
}

void check_router(int64_t experts, int64_t top_k) {
  if (experts < 1 || top_k < 1 || top_k > experts) {
    throw Error(Where{"", "", "--routing"}, "needs 1 ≤ top-k ≤ experts, got top-k " + std::to_string(top_k) + " of " +
                                                std::to_string(experts));
  }
}

}  // namespace

std::string RoutingSkew::text() const {
  if (zipf == 0) return "uniform";
  std::ostringstream s;
  s << "zipf:" << zipf;
  return s.str();
}

RoutingSkew parse_routing_skew(const std::string& text) {
  if (text == "uniform") return {};
  const std::string prefix = "zipf:";
  if (text.rfind(prefix, 0) == 0) {
    const std::string value = text.substr(prefix.size());
    size_t used = 0;
    double s = 0;
    try {
      s = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == value.size() && !value.empty() && s > 0 && s <= kMaxZipf) return {s};
  }
  std::ostringstream why;
  why << "'" << text << "' is not uniform or zipf:S with 0 < S ≤ " << kMaxZipf;
  throw Error(Where{"", "", "--routing"}, why.str());
}

void check_routing_skew(const K3Config& config, const RoutingSkew& skew, const std::string& model) {
  if (skew.zipf == 0) return;
  if (!config.moe) throw Error(Where{"", "", "--routing"}, model + " has no routed experts");
  if (config.moe->num_expert_group != 1) {
    throw Error(Where{"", "", "--routing"}, "a skew is fitted for one expert group; " + model + " has " +
                                                std::to_string(config.moe->num_expert_group));
  }
}

std::vector<double> target_pick_shares(int64_t experts, int64_t top_k, const RoutingSkew& skew) {
  check_router(experts, top_k);
  std::vector<double> weight(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) weight[static_cast<size_t>(e)] = std::pow(static_cast<double>(e + 1), -skew.zipf);
  // Water-filling: the shares of the hottest experts are capped at 1 one after the other, the rest of
  // the k picks spread over the uncapped experts in proportion to their weights.
  std::vector<double> shares(weight.size(), 0.0);
  int64_t capped = 0;
  while (true) {
    const double left = static_cast<double>(top_k - capped);
    const double total = std::accumulate(weight.begin() + capped, weight.end(), 0.0);
    const double first = left * weight[static_cast<size_t>(capped)] / total;  // the largest uncapped share
    if (first <= 1.0 || capped + 1 == experts) {
      for (int64_t e = capped; e < experts; ++e) shares[static_cast<size_t>(e)] = std::min(1.0, left * weight[static_cast<size_t>(e)] / total);
      return shares;
    }
    shares[static_cast<size_t>(capped++)] = 1.0;
  }
}

std::vector<double> simulated_pick_shares(std::span<const float> bias, int64_t top_k, int64_t tokens, uint64_t seed) {
  check_router(static_cast<int64_t>(bias.size()), top_k);
  return pick_shares(simulated_scores(static_cast<int64_t>(bias.size()), tokens, seed), bias, top_k);
}

std::vector<float> skewed_correction_bias(int64_t experts, int64_t top_k, const RoutingSkew& skew, uint64_t seed) {
  const std::vector<double> target = target_pick_shares(experts, top_k, skew);
  std::vector<float> bias(static_cast<size_t>(experts), 0.0f);
  if (skew.zipf == 0) return bias;
  const std::vector<float> scores = simulated_scores(experts, kFitTokens, seed);
  double step = 1.0;
  double last_gap = 1e30;
  for (int round = 0; round < kFitRounds; ++round) {
    const std::vector<double> got = pick_shares(scores, bias, top_k);
    double gap = 0;
    for (size_t e = 0; e < bias.size(); ++e) {
      gap = std::max(gap, std::fabs(target[e] - got[e]));
      bias[e] += static_cast<float>(step * (target[e] - got[e]));
    }
    if (gap < kFitTolerance) break;
    if (gap >= last_gap) step *= 0.5;  // overshooting: settle
    last_gap = gap;
  }
  return bias;
}

double distinct_experts_per_step(std::span<const double> shares, int64_t batch) {
  double distinct = 0;
  for (const double s : shares) distinct += 1.0 - std::pow(1.0 - std::min(1.0, s), static_cast<double>(batch));
  return distinct;
}

}  // namespace k3
