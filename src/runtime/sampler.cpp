#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace k3 {

void validate(const SamplingParams& p) {
  if (p.greedy) return;
  if (!(p.temperature > 0) || !std::isfinite(p.temperature)) throw Error(Where{"", "", "temperature"}, "must be a finite number > 0");
  if (p.top_k < 0) throw Error(Where{"", "", "top_k"}, "must be ≥ 0 (0 = no limit)");
  if (!(p.top_p > 0 && p.top_p <= 1)) throw Error(Where{"", "", "top_p"}, "must be in (0, 1]");
}

TokenLogprobs logprobs_of(std::span<const float> logits, int64_t chosen, int top_n) {
  const double top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - top);
  const double log_z = top + std::log(sum);
  const auto lp = [&](int64_t id) { return static_cast<float>(static_cast<double>(logits[id]) - log_z); };
  TokenLogprobs r{chosen, lp(chosen), {}};
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t n = std::min<size_t>(static_cast<size_t>(std::max(top_n, 0)), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&](int64_t a, int64_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (size_t i = 0; i < n; ++i) r.top.emplace_back(order[i], lp(order[i]));
  return r;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate(params); }

int64_t Sampler::next(std::span<const float> logits) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (params_.greedy) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  // Candidates by decreasing logit (ties: lower id first), cut to top-k.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (params_.top_k > 0 && params_.top_k < n) order.resize(static_cast<size_t>(params_.top_k));
  // Softmax at the temperature over the candidates (double: exact enough for any vocabulary).
  std::vector<double> prob(order.size());
  const double top = logits[order.front()];
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += (prob[i] = std::exp((logits[order[i]] - top) / params_.temperature));
  for (double& p : prob) p /= sum;
  // Nucleus: the shortest prefix whose mass reaches top_p.
  size_t keep = prob.size();
  double mass = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    mass += prob[i];
    if (mass >= params_.top_p) {
      keep = i + 1;
      break;
    }
  }
  const double kept = std::accumulate(prob.begin(), prob.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  const double u = std::uniform_real_distribution<double>(0.0, kept)(rng_);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += prob[i];
    if (u < acc) return order[i];
  }
  return order[keep - 1];
}

}  // namespace k3
