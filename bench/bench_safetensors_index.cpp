// Opening a 1000-shard safetensors checkpoint (index + every shard header; no payload mapped).
// The checkpoint (2 small tensors per shard) is generated once in a temporary directory.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace {

constexpr int kShards = 1000;

class ShardedCheckpoint {
 public:
  ShardedCheckpoint() : dir_(fs::temp_directory_path() / ("k3-bench-st-" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
    std::map<std::string, std::string> weight_map;
    uint64_t total = 0;
    for (int s = 0; s < kShards; ++s) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, kShards);
      k3::SafetensorsWriter w;
      const std::string prefix = "model.layers." + std::to_string(s) + ".";
      w.add(prefix + "weight", k3::Dtype::BF16, {4, 8}, std::vector<uint8_t>(64, 1));
      w.add(prefix + "weight_scale", k3::Dtype::F32, {1}, std::vector<uint8_t>(4, 2));
      w.write((dir_ / name).string());
      weight_map[prefix + "weight"] = weight_map[prefix + "weight_scale"] = name;
      total += w.payload_size();
    }
    k3::write_safetensors_index((dir_ / "model.safetensors.index.json").string(), weight_map, total);
  }
  ~ShardedCheckpoint() { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

void BM_OpenShardedCheckpoint(benchmark::State& state) {
  static ShardedCheckpoint checkpoint;
  const uint64_t maps = k3::File::payload_maps();
  for (auto _ : state) {
    auto ck = k3::SafetensorsCheckpoint::open(checkpoint.dir());
    benchmark::DoNotOptimize(ck.size());
  }
  if (k3::File::payload_maps() != maps) state.SkipWithError("opening mapped a payload");
  state.counters["shards"] = kShards;
}
BENCHMARK(BM_OpenShardedCheckpoint)->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();
