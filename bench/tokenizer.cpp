// Encode throughput on the tokenizer reference corpus (o200k ranks + Kimi pattern, single thread).
// The corpus comes from scripts/tokenizer_reference.sh; scripts/tokenizer_bench.sh runs this next to
// the npm `tiktoken` package on the same text.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

fs::path reference_dir() {
  if (const char* env = std::getenv("K3_TOKENIZER_REFERENCE")) return env;
  return fs::path(__FILE__).parent_path() / "../build/tokenizer-reference";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void BM_EncodeCorpus(benchmark::State& state) {
  const fs::path dir = reference_dir();
  if (!fs::exists(dir / "corpus.txt")) {
    state.SkipWithError("no reference corpus: run scripts/tokenizer_reference.sh");
    return;
  }
  const auto tokens = k3::parse_tiktoken_model(slurp(dir / "tiktoken.model"), "tiktoken.model");
  const k3::Tokenizer tok(tokens, {}, k3::kimi_pattern());
  const std::string corpus = slurp(dir / "corpus.txt");
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    ids.clear();
    tok.encode(corpus, k3::Specials::kNone, ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(corpus.size()));
  state.counters["tokens"] = static_cast<double>(ids.size());
}
BENCHMARK(BM_EncodeCorpus)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
