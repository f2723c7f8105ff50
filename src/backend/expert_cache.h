// The bookkeeping of expert streaming: routed experts live in host memory and a fixed
// number of device slots caches them. For one MoE layer of one step, the experts the router picked
// are planned into waves: every picked expert runs (no pruning); a wave is a set of experts resident
// at once — the hits first, then misses loaded into slots no expert of the current wave needs, least
// recently used first. When a layer needs more distinct experts than there are slots, later waves
// reuse the slots of earlier ones (the GEMMs run per wave over the same dispatch, skipping the tiles
// of experts not in the wave). Host-only, no CUDA: the executor turns a plan into copies and a
// device slot table.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace k3 {

// An expert of a layer: key = layer · experts_per_layer + expert.
using ExpertKey = int64_t;

struct ExpertLoad {
  ExpertKey key;
  int32_t slot;
};

struct ExpertWave {
  std::vector<ExpertKey> experts;  // resident during this wave, in the order they were asked for
  std::vector<int32_t> slots;      // slots[i] holds experts[i]
  std::vector<ExpertLoad> loads;   // copies to finish before the wave runs (the misses)
};

struct ExpertCacheStats {
  int64_t hits = 0, misses = 0, waves = 0, plans = 0;
  double hit_rate() const { return hits + misses > 0 ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0.0; }
};

class ExpertCache {
 public:
  // slots ≥ 1. Throws k3::Error otherwise.
  explicit ExpertCache(int64_t slots);

  // The waves that run `needed` (distinct keys; duplicates are an error) with the cache as it is,
  // updating residency, recency and statistics as if every wave ran in order. Each wave holds at most
  // slots() experts; the first holds every hit (up to slots()).
  std::vector<ExpertWave> plan(const std::vector<ExpertKey>& needed);

  int64_t slots() const { return static_cast<int64_t>(slot_key_.size()); }
  bool resident(ExpertKey key) const { return where_.count(key) != 0; }
  const ExpertCacheStats& stats() const { return stats_; }

 private:
  void touch(int32_t slot);  // most recently used
  std::vector<ExpertKey> slot_key_;            // -1: empty
  std::list<int32_t> lru_;                     // slots, least recently used first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::unordered_map<ExpertKey, int32_t> where_;
  ExpertCacheStats stats_;
};

}  // namespace k3
