#include "backend/expert_cache.h"

#include <string>
#include <unordered_set>

#include "core/error.h"

namespace k3 {

ExpertCache::ExpertCache(int64_t slots) {
  if (slots < 1 || slots > INT32_MAX) throw Error("expert cache: needs at least one slot, got " + std::to_string(slots));
  slot_key_.assign(static_cast<size_t>(slots), -1);
  lru_pos_.resize(static_cast<size_t>(slots));
  for (int32_t s = 0; s < static_cast<int32_t>(slots); ++s) lru_pos_[static_cast<size_t>(s)] = lru_.insert(lru_.end(), s);
}

void ExpertCache::touch(int32_t slot) {
  lru_.splice(lru_.end(), lru_, lru_pos_[static_cast<size_t>(slot)]);
}

std::vector<ExpertWave> ExpertCache::plan(const std::vector<ExpertKey>& needed) {
  std::unordered_set<ExpertKey> seen;
  std::vector<ExpertKey> order;  // hits first, then misses, each in the order asked
  order.reserve(needed.size());
  for (ExpertKey k : needed) {
    if (k < 0) throw Error("expert cache: negative expert key " + std::to_string(k));
    if (!seen.insert(k).second) throw Error("expert cache: expert key " + std::to_string(k) + " asked twice in one plan");
    if (resident(k)) order.push_back(k);
  }
  for (ExpertKey k : needed) {
    if (!resident(k)) order.push_back(k);
  }

  std::vector<ExpertWave> waves;
  size_t next = 0;
  while (next < order.size()) {
    ExpertWave wave;
    // The slots this wave has touched sit at the back of the LRU list and the wave never fills every
    // slot before the last pick, so the front is always a slot the wave does not use. A wave that
    // starts with hits left over from a full first wave loads nothing before them: they are still
    // resident.
    while (next < order.size() && static_cast<int64_t>(wave.experts.size()) < slots()) {
      const ExpertKey key = order[next++];
      int32_t slot;
      if (const auto it = where_.find(key); it != where_.end()) {
        slot = it->second;
        ++stats_.hits;
      } else {
        slot = lru_.front();
        const ExpertKey evicted = slot_key_[static_cast<size_t>(slot)];
        if (evicted >= 0) where_.erase(evicted);
        slot_key_[static_cast<size_t>(slot)] = key;
        where_.emplace(key, slot);
        wave.loads.push_back({key, slot});
        ++stats_.misses;
      }
      touch(slot);
      wave.experts.push_back(key);
      wave.slots.push_back(slot);
    }
    waves.push_back(std::move(wave));
  }
  stats_.waves += static_cast<int64_t>(waves.size());
  ++stats_.plans;
  return waves;
}

}  // namespace k3
