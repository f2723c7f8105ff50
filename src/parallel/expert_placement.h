// Which rank computes each pick of a routed expert under expert parallelism. The contiguous split
// (split_range) gives every rank the same number of experts; when routing is skewed, the rank
// holding the hot experts does most of the work while the others wait. A balanced placement
// (EPLB-style, static) is made from a routing histogram recorded on real traffic
// (--record-routing): every rank gets `slots` experts, the extra slots holding redundant copies of
// the hottest experts, and the copies are packed so that the ranks' expected loads are as even as a
// greedy packing makes them. A pick goes to one of its expert's holders by token index, so the
// copies share their expert's tokens.
//
// Numerics do not change: a copy computes its rows with the same weights and kernels, and each
// token's expert outputs are still added in ascending expert order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace k3 {

// Picks per routed expert in each MoE layer (model layer index → one count per expert).
struct RoutingHistogram {
  int64_t experts = 0;
  std::map<int64_t, std::vector<uint64_t>> layers;

  void add(int64_t layer, int64_t expert);
  // JSON: {"experts": E, "layers": {"1": [counts…], …}}.
  void save(const std::string& path) const;
  // Throws k3::Error naming the file and field for anything malformed (counts of the wrong length,
  // an expert count that is not `experts`).
  static RoutingHistogram load(const std::string& path, int64_t experts);
};

class ExpertPlacement {
 public:
  // Rank r holds split_range(experts, ranks, r) in every layer.
  ExpertPlacement(int64_t experts, int ranks);
  // Balanced from `histogram`: every rank holds ⌈experts / ranks⌉ + `redundant` experts in each
  // layer of the histogram (layers it lacks are contiguous), every expert at least once.
  ExpertPlacement(const RoutingHistogram& histogram, int ranks, int redundant);

  int ranks() const { return ranks_; }
  int64_t experts() const { return experts_; }
  // Whether `rank` holds `expert` of `layer` (binds its weights).
  bool holds(int rank, int64_t layer, int64_t expert) const;
  // The rank that computes token `token`'s pick of `expert` in `layer`.
  int holder(int64_t layer, int64_t expert, int64_t token) const;
  // The largest rank load over the mean rank load of `layer` under `histogram`, with each expert's
  // picks shared evenly among its copies (1 is perfect balance).
  double imbalance(const RoutingHistogram& histogram, int64_t layer) const;

 private:
  // The ranks holding each expert of a balanced layer, in rank order.
  const std::vector<std::vector<int>>* balanced(int64_t layer) const;

  int64_t experts_;
  int ranks_;
  std::map<int64_t, std::vector<std::vector<int>>> holders_;  // balanced layers only
};

// Hybrid CPU/GPU experts: which `count` routed experts of each MoE layer the CPU computes among the
// experts [first, end) a GPU would hold (all of them, or an expert-parallel rank's split); the rest
// stay on the GPU. With a histogram, the `count` candidates with the fewest recorded picks (ties: the
// higher index), so the hot experts stay on the GPU; without one, or for a layer the histogram
// lacks, the last `count`. The result is indexed [layer][expert] (all `experts`) over `moe_layers`
// (true: a MoE layer); non-MoE layers get an empty list. Throws k3::Error (field '--experts-on-cpu')
// unless 0 < count < end − first.
std::vector<std::vector<bool>> choose_cpu_experts(const std::vector<bool>& moe_layers, int64_t experts, int64_t count,
                                                  const RoutingHistogram* histogram, int64_t first, int64_t end);

}  // namespace k3
