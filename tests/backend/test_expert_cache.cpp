// ExpertCache (expert streaming's bookkeeping): hits before misses, least-recently-used eviction
// outside the current wave, waves when a layer needs more experts than there are slots, statistics,
// errors; and a randomized run against a simulated device slot table and a reference LRU clock.
#include "backend/expert_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "core/error.h"

namespace k3 {
namespace {

TEST(ExpertCache, ColdPlanLoadsEveryExpertIntoEmptySlots) {
  ExpertCache cache(4);
  const std::vector<ExpertWave> w = cache.plan({7, 3, 9});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].experts, (std::vector<ExpertKey>{7, 3, 9}));
  EXPECT_EQ(w[0].slots, (std::vector<int32_t>{0, 1, 2}));
  ASSERT_EQ(w[0].loads.size(), 3u);
  EXPECT_EQ(cache.stats().misses, 3);
  EXPECT_EQ(cache.stats().hits, 0);
  EXPECT_TRUE(cache.resident(3));
  EXPECT_FALSE(cache.resident(4));
}

TEST(ExpertCache, HitsComeFirstAndMissesEvictTheLeastRecentlyUsed) {
  ExpertCache cache(4);
  cache.plan({1, 2, 3});  // slots 0, 1, 2; slot 3 empty
  const std::vector<ExpertWave> w = cache.plan({4, 2, 5, 3});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].experts, (std::vector<ExpertKey>{2, 3, 4, 5}));  // hits 2, 3 first
  // 4 takes the empty slot 3; 5 evicts key 1 (slot 0, used longest ago).
  ASSERT_EQ(w[0].loads.size(), 2u);
  EXPECT_EQ(w[0].loads[0].key, 4);
  EXPECT_EQ(w[0].loads[0].slot, 3);
  EXPECT_EQ(w[0].loads[1].key, 5);
  EXPECT_EQ(w[0].loads[1].slot, 0);
  EXPECT_FALSE(cache.resident(1));
  EXPECT_EQ(cache.stats().hits, 2);
  EXPECT_EQ(cache.stats().misses, 5);
  EXPECT_DOUBLE_EQ(cache.stats().hit_rate(), 2.0 / 7.0);
}

TEST(ExpertCache, MoreExpertsThanSlotsRunInWaves) {
  ExpertCache cache(3);
  const std::vector<ExpertWave> w = cache.plan({10, 11, 12, 13, 14, 15, 16});
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].experts.size(), 3u);
  EXPECT_EQ(w[1].experts.size(), 3u);
  EXPECT_EQ(w[2].experts, (std::vector<ExpertKey>{16}));
  EXPECT_EQ(cache.stats().waves, 3);
  // The last wave's expert and the two most recent of the wave before stay resident.
  EXPECT_TRUE(cache.resident(16));
  EXPECT_TRUE(cache.resident(15));
  EXPECT_TRUE(cache.resident(14));
  EXPECT_FALSE(cache.resident(13));
}

TEST(ExpertCache, HitsBeyondTheSlotsLoadNothingBeforeTheyRun) {
  ExpertCache cache(2);
  cache.plan({1, 2});
  const std::vector<ExpertWave> w = cache.plan({3, 1, 2});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].experts, (std::vector<ExpertKey>{1, 2}));
  EXPECT_TRUE(w[0].loads.empty());
  ASSERT_EQ(w[1].loads.size(), 1u);
  EXPECT_EQ(w[1].loads[0].key, 3);
  EXPECT_EQ(w[1].loads[0].slot, 0);  // key 1's slot: used before key 2's in the first wave
}

TEST(ExpertCache, BadInputIsAnError) {
  EXPECT_THROW(ExpertCache(0), Error);
  ExpertCache cache(2);
  try {
    cache.plan({4, 5, 4});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert key 4 asked twice"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cache.plan({-1}), Error);
  EXPECT_TRUE(cache.plan({}).empty());
}

// Random plans against a simulated slot table: every wave's experts sit in their slots once its
// loads are done, every asked expert runs exactly once, hits are the experts resident before the
// plan, and each load takes the least recently used slot outside its wave (a reference clock).
TEST(ExpertCache, RandomPlansKeepEveryInvariant) {
  std::mt19937_64 gen(1234);
  for (int64_t slots : {1, 3, 16}) {
    ExpertCache cache(slots);
    std::vector<ExpertKey> device(static_cast<size_t>(slots), -1);
    std::vector<int64_t> last_use(static_cast<size_t>(slots));
    for (int64_t s = 0; s < slots; ++s) last_use[static_cast<size_t>(s)] = s - slots;  // empties in slot order
    int64_t clock = 0, hits = 0, misses = 0;
    for (int round = 0; round < 300; ++round) {
      std::set<ExpertKey> pick;
      const int n = std::uniform_int_distribution<int>(0, static_cast<int>(2 * slots + 2))(gen);
      while (static_cast<int>(pick.size()) < n) pick.insert(std::uniform_int_distribution<ExpertKey>(0, 40)(gen));
      std::vector<ExpertKey> needed(pick.begin(), pick.end());
      std::shuffle(needed.begin(), needed.end(), gen);
      std::set<ExpertKey> before;
      for (ExpertKey k : needed) {
        if (std::find(device.begin(), device.end(), k) != device.end()) before.insert(k);
      }
      const std::vector<ExpertWave> waves = cache.plan(needed);
      std::multiset<ExpertKey> ran;
      for (const ExpertWave& w : waves) {
        ASSERT_LE(static_cast<int64_t>(w.experts.size()), slots);
        ASSERT_EQ(w.experts.size(), w.slots.size());
        std::set<int32_t> in_wave(w.slots.begin(), w.slots.end());
        ASSERT_EQ(in_wave.size(), w.slots.size()) << "two experts of a wave share a slot";
        std::set<int32_t> used;  // slots of this wave taken so far, in order of the picks
        size_t next_load = 0;
        for (size_t i = 0; i < w.experts.size(); ++i) {
          const int32_t s = w.slots[i];
          if (next_load < w.loads.size() && w.loads[next_load].key == w.experts[i]) {
            ASSERT_EQ(w.loads[next_load].slot, s);
            int64_t oldest = INT64_MAX;
            for (int64_t t = 0; t < slots; ++t) {
              if (!used.count(static_cast<int32_t>(t))) oldest = std::min(oldest, last_use[static_cast<size_t>(t)]);
            }
            ASSERT_EQ(last_use[static_cast<size_t>(s)], oldest) << "not the least recently used slot";
            device[static_cast<size_t>(s)] = w.experts[i];
            ++next_load;
            ++misses;
          } else {
            ASSERT_EQ(device[static_cast<size_t>(s)], w.experts[i]) << "a hit that is not resident";
            ++hits;
          }
          used.insert(s);
          last_use[static_cast<size_t>(s)] = clock++;
          ran.insert(w.experts[i]);
        }
        ASSERT_EQ(next_load, w.loads.size());
        for (size_t i = 0; i < w.experts.size(); ++i) ASSERT_EQ(device[static_cast<size_t>(w.slots[i])], w.experts[i]);
      }
      ASSERT_EQ(ran, std::multiset<ExpertKey>(needed.begin(), needed.end()));
      int64_t first_wave_hits = 0;
      for (const ExpertWave& w : waves) first_wave_hits += static_cast<int64_t>(w.experts.size() - w.loads.size());
      ASSERT_EQ(first_wave_hits, static_cast<int64_t>(before.size()));
    }
    EXPECT_EQ(cache.stats().hits, hits);
    EXPECT_EQ(cache.stats().misses, misses);
  }
}

}  // namespace
}  // namespace k3
