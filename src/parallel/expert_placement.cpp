#include "parallel/expert_placement.h"

#include <algorithm>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "io/json.h"
#include "parallel/sharding.h"

namespace k3 {

void RoutingHistogram::add(int64_t layer, int64_t expert) {
  std::vector<uint64_t>& counts = layers[layer];
  if (counts.empty()) counts.assign(static_cast<size_t>(experts), 0);
  ++counts[static_cast<size_t>(expert)];
}

void RoutingHistogram::save(const std::string& path) const {
  Json doc = {{"experts", experts}, {"layers", Json::object()}};
  for (const auto& [layer, counts] : layers) doc["layers"][std::to_string(layer)] = counts;
  std::ofstream out(path);
  out << doc.dump() << "\n";
  if (!out) throw Error(Where{path, "", ""}, "cannot write the routing histogram");
}

RoutingHistogram RoutingHistogram::load(const std::string& path, int64_t experts) {
  const JsonNode doc = load_json_file(path).as_object();
  RoutingHistogram h;
  h.experts = doc.required_int("experts", experts, experts);
  for (const auto& member : doc.object("layers").members()) {
    const std::string& key = member.first;  // named (not bound) so the lambda below may capture it
    const JsonNode& counts = member.second;
    const int64_t layer = [&] {
      try {
        size_t used = 0;
        const long long v = std::stoll(key, &used);
        if (used == key.size() && v >= 0) return static_cast<int64_t>(v);
      } catch (const std::exception&) {
      }
      counts.fail("layer key '" + key + "' is not a layer index");
    }();
    const std::vector<JsonNode> values = counts.elements();
    if (static_cast<int64_t>(values.size()) != experts) {
      counts.fail("has " + std::to_string(values.size()) + " counts for " + std::to_string(experts) + " experts");
    }
    std::vector<uint64_t>& out = h.layers[layer];
    for (const JsonNode& v : values) out.push_back(static_cast<uint64_t>(v.as_int_in(0, int64_t{1} << 62)));
  }
  return h;
}

ExpertPlacement::ExpertPlacement(int64_t experts, int ranks) : experts_(experts), ranks_(ranks) {}

ExpertPlacement::ExpertPlacement(const RoutingHistogram& histogram, int ranks, int redundant)
    : experts_(histogram.experts), ranks_(ranks) {
  const int64_t E = experts_, slots = (E + ranks - 1) / ranks + redundant;
  for (const auto& entry : histogram.layers) {
    const int64_t layer = entry.first;  // named (not bound) so the lambdas below may capture them
    const std::vector<uint64_t>& counts = entry.second;
    // Copies: one per expert, then each extra one to the expert with the most picks per copy.
    std::vector<int64_t> copies(static_cast<size_t>(E), 1);
    const auto per_copy = [&](int64_t e) { return static_cast<double>(counts[static_cast<size_t>(e)]) / static_cast<double>(copies[static_cast<size_t>(e)]); };
    for (int64_t extra = slots * ranks - E; extra > 0; --extra) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        if (copies[static_cast<size_t>(e)] < ranks && (best < 0 || per_copy(e) > per_copy(best))) best = e;
      }
      if (best < 0) break;  // every expert on every rank
      ++copies[static_cast<size_t>(best)];
    }
    // Pack the copies, heaviest first, each onto the least loaded rank with a free slot that does
    // not hold its expert yet (ties: the lower rank).
    std::vector<std::pair<double, int64_t>> items;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t c = 0; c < copies[static_cast<size_t>(e)]; ++c) items.push_back({per_copy(e), e});
    }
    std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<double> load(static_cast<size_t>(ranks), 0.0);
    std::vector<int64_t> used(static_cast<size_t>(ranks), 0);
    std::vector<std::vector<int>>& holders = holders_[layer];
    holders.assign(static_cast<size_t>(E), {});
    for (const auto& [weight, e] : items) {
      int best = -1;
      for (int r = 0; r < ranks; ++r) {
        const auto& h = holders[static_cast<size_t>(e)];
        if (used[static_cast<size_t>(r)] >= slots || std::find(h.begin(), h.end(), r) != h.end()) continue;
        if (best < 0 || load[static_cast<size_t>(r)] < load[static_cast<size_t>(best)]) best = r;
      }
      if (best < 0) continue;  // no rank can take another copy of e: it keeps the ones it has
      holders[static_cast<size_t>(e)].push_back(best);
      load[static_cast<size_t>(best)] += weight;
      ++used[static_cast<size_t>(best)];
    }
    for (auto& h : holders) {
      if (h.empty()) throw Error(Where{"", "", "--redundant-experts"}, "the placement left an expert without a rank");
      std::sort(h.begin(), h.end());
    }
  }
}

const std::vector<std::vector<int>>* ExpertPlacement::balanced(int64_t layer) const {
  const auto it = holders_.find(layer);
  return it == holders_.end() ? nullptr : &it->second;
}

bool ExpertPlacement::holds(int rank, int64_t layer, int64_t expert) const {
  if (const auto* h = balanced(layer)) {
    const std::vector<int>& ranks = (*h)[static_cast<size_t>(expert)];
    return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
  }
  return split_owner(expert, experts_, ranks_) == rank;
}

int ExpertPlacement::holder(int64_t layer, int64_t expert, int64_t token) const {
  if (const auto* h = balanced(layer)) {
    const std::vector<int>& ranks = (*h)[static_cast<size_t>(expert)];
    return ranks[static_cast<size_t>(token % static_cast<int64_t>(ranks.size()))];
  }
  return static_cast<int>(split_owner(expert, experts_, ranks_));
}

double ExpertPlacement::imbalance(const RoutingHistogram& histogram, int64_t layer) const {
  const auto it = histogram.layers.find(layer);
  if (it == histogram.layers.end()) return 1.0;
  std::vector<double> load(static_cast<size_t>(ranks_), 0.0);
  for (int64_t e = 0; e < experts_; ++e) {
    std::vector<int> ranks;
    for (int r = 0; r < ranks_; ++r) {
      if (holds(r, layer, e)) ranks.push_back(r);
    }
    for (int r : ranks) load[static_cast<size_t>(r)] += static_cast<double>(it->second[static_cast<size_t>(e)]) / static_cast<double>(ranks.size());
  }
  const double total = std::accumulate(load.begin(), load.end(), 0.0);
  return total == 0 ? 1.0 : *std::max_element(load.begin(), load.end()) / (total / ranks_);
}

std::vector<std::vector<bool>> choose_cpu_experts(const std::vector<bool>& moe_layers, int64_t experts, int64_t count,
                                                  const RoutingHistogram* histogram, int64_t first, int64_t end) {
  if (first < 0 || end > experts || first >= end) throw Error("choose_cpu_experts: an empty or out-of-range expert range");
  if (count <= 0 || count >= end - first) {
    throw Error(Where{"", "", "--experts-on-cpu"}, "is " + std::to_string(count) + "; it must be between 1 and " +
                                                       std::to_string(end - first - 1) + " (the GPU keeps at least one expert)");
  }
  std::vector<std::vector<bool>> on_cpu(moe_layers.size());
  for (size_t l = 0; l < moe_layers.size(); ++l) {
    if (!moe_layers[l]) continue;
    std::vector<int64_t> order(static_cast<size_t>(end - first));
    std::iota(order.begin(), order.end(), first);
    const std::vector<uint64_t>* picks = nullptr;
    if (histogram != nullptr) {
      const auto it = histogram->layers.find(static_cast<int64_t>(l));
      if (it != histogram->layers.end()) picks = &it->second;
    }
    if (picks != nullptr) {  // coldest first; among equal counts the higher index first
      const std::vector<uint64_t>& n = *picks;
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return n[a] != n[b] ? n[a] < n[b] : a > b; });
    } else {
      std::reverse(order.begin(), order.end());
    }
    on_cpu[l].assign(static_cast<size_t>(experts), false);
    for (int64_t i = 0; i < count; ++i) on_cpu[l][static_cast<size_t>(order[static_cast<size_t>(i)])] = true;
  }
  return on_cpu;
}

}  // namespace k3
