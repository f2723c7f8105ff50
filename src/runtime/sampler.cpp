#include "runtime/sampler.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace k3 {

void validate(const SamplingParams& p) {
  if (!(p.min_p >= 0 && p.min_p <= 1)) throw Error(Where{"", "", "min_p"}, "must be in [0, 1]");
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    throw Error(Where{"", "", "presence_penalty"}, "must be in [-2, 2]");
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    throw Error(Where{"", "", "frequency_penalty"}, "must be in [-2, 2]");
  if (p.greedy) return;
  if (!(p.temperature > 0) || !std::isfinite(p.temperature)) throw Error(Where{"", "", "temperature"}, "must be a finite number > 0");
  if (p.top_k < 0) throw Error(Where{"", "", "top_k"}, "must be ≥ 0 (0 = no limit)");
  if (!(p.top_p > 0 && p.top_p <= 1)) throw Error(Where{"", "", "top_p"}, "must be in (0, 1]");
}

TokenLogprobs logprobs_of(std::span<const float> logits, int64_t chosen, int top_n) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (chosen < 0 || chosen >= n) throw Error(Where{"", "", "chosen"}, "id out of range of the logits");
  double top = -INFINITY;
  for (float l : logits) top = std::max(top, static_cast<double>(l));
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - top);
  const double log_z = top + std::log(sum);
  auto logprob = [&](int64_t i) { return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(i)]) - log_z); };
  TokenLogprobs r;
  r.id = chosen;
  r.logprob = logprob(chosen);
  const int64_t k = std::min<int64_t>(std::clamp(top_n, 0, kMaxTopLogprobs), n);
  if (k == 0) return r;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la != lb ? la > lb : a < b;
  });
  for (int64_t i = 0; i < k; ++i) r.top.emplace_back(order[static_cast<size_t>(i)], logprob(order[static_cast<size_t>(i)]));
  return r;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate(params); }

void Sampler::observe(int64_t id) {
  if (penalized()) ++counts_[id];
}

RowSampling Sampler::device_row() {
  RowSampling r;
  r.greedy = params_.greedy;
  r.temperature = static_cast<float>(params_.temperature);
  r.top_k = static_cast<int32_t>(std::min<int64_t>(params_.top_k, INT32_MAX));
  r.top_p = static_cast<float>(params_.top_p);
  r.min_p = static_cast<float>(params_.min_p);
  if (!params_.greedy) r.u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  for (const auto& [id, count] : counts_) {
    r.penalties.emplace_back(static_cast<int32_t>(id),
                             static_cast<float>(params_.presence_penalty + params_.frequency_penalty * static_cast<double>(count)));
  }
  return r;
}

int64_t Sampler::next(std::span<const float> logits, std::span<const uint32_t> allowed) {
  const int64_t id = draw(logits, allowed);
  observe(id);
  return id;
}

int64_t Sampler::draw(std::span<const float> logits, std::span<const uint32_t> allowed) {
  if (!penalized() && allowed.empty()) return choose(logits);
  penalized_.assign(logits.begin(), logits.end());
  for (const auto& [id, count] : counts_) {
    if (id < 0 || id >= static_cast<int64_t>(penalized_.size())) continue;
    float& l = penalized_[static_cast<size_t>(id)];
    l = static_cast<float>(l - (params_.presence_penalty + params_.frequency_penalty * static_cast<double>(count)));
  }
  if (!allowed.empty()) {
    bool any = false;
    for (size_t i = 0; i < penalized_.size(); ++i) {
      const bool ok = i / 32 < allowed.size() && (allowed[i / 32] >> (i % 32) & 1u);
      if (!ok) penalized_[i] = -std::numeric_limits<float>::infinity();
      any = any || ok;
    }
    if (!any) throw Error(Where{"", "", "allowed"}, "the token mask allows no token");
  }
  return choose(penalized_);
}

int64_t Sampler::choose(std::span<const float> logits) {
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
  // Min-p: of those, the ones at least min_p times as likely as the best (a prefix: prob is sorted).
  if (params_.min_p > 0) {
    const double floor = params_.min_p * prob.front();
    size_t above = 1;
    while (above < keep && prob[above] >= floor) ++above;
    keep = above;
  }
  while (keep > 1 && prob[keep - 1] == 0) --keep;  // masked (−inf) or underflowed: never drawn
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
