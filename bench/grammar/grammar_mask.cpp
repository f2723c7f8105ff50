// Grammar mask benchmark: for each schema of tests/grammar/schemas.json, the compile time against
// the real-size stand-in vocabulary (o200k ranks + 256 specials, scripts/tokenizer_reference.sh)
// and the time of Matcher::fill_mask at every step of driving the matcher along the schema's
// document (pretty-printed, indent 2) tokenized with that vocabulary. One thread for the masks.
// Prints one row per schema and the median / p99 over all steps.
//   k3_bench_grammar_mask [--rounds N] [--compile-threads N] [--schemas FILE] [--reference DIR] [--only NAME]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "grammar/grammar.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using namespace k3::grammar;
using Clock = std::chrono::steady_clock;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  fs::path schemas = fs::path(K3_SOURCE_DIR) / "tests/grammar/schemas.json";
  fs::path reference = fs::path(K3_SOURCE_DIR) / "build/tokenizer-reference";
  int rounds = 5;
  unsigned compile_threads = 1;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--compile-threads")) compile_threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--schemas")) schemas = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reference")) reference = argv[i + 1];
    else if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (!fs::exists(reference / "tiktoken.model")) {
    std::fprintf(stderr, "no %s: run scripts/tokenizer_reference.sh\n", (reference / "tiktoken.model").c_str());
    return 1;
  }
  const auto tokens = k3::parse_tiktoken_model(slurp(reference / "tiktoken.model"), "tiktoken.model");
  std::vector<k3::SpecialToken> specials;
  std::istringstream names(slurp(reference / "specials.txt"));
  for (std::string name; std::getline(names, name);)
    specials.push_back({name, static_cast<uint32_t>(tokens.size() + specials.size()), true});
  const k3::Tokenizer tokenizer(tokens, specials, k3::kimi_pattern());
  auto t0 = Clock::now();
  const VocabularyPtr vocab = TokenVocabulary::from_tokenizer(tokenizer);
  const double vocab_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const uint32_t eos = tokenizer.special_id("[EOS]");
  std::printf("vocabulary: %u ids, trie %zu nodes, built in %.0f ms; mask rounds %d; compile threads %u\n", vocab->size(),
              vocab->trie().size(), vocab_ms, rounds, compile_threads);
  std::printf("%-14s %9s %6s %9s %6s %9s %9s %9s\n", "schema", "compile", "posns", "uncertain", "steps", "median_us",
              "p99_us", "max_us");

  const OrderedJson corpus = OrderedJson::parse(slurp(schemas));
  std::vector<double> all;
  std::vector<double> compile_ms;
  for (const OrderedJson& entry : corpus) {
    const std::string name = entry["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    t0 = Clock::now();
    const CompiledGrammarPtr g = compile_json_schema(entry["schema"], vocab, {}, {.threads = compile_threads});
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    compile_ms.push_back(ms);
    const std::string doc = entry["documents"][0].dump(2, ' ', false);
    const std::vector<uint32_t> ids = tokenizer.encode(doc, k3::Specials::kNone);
    std::vector<uint32_t> mask(g->mask_words());
    std::vector<std::vector<double>> per_step(ids.size() + 1);
    for (int r = 0; r < rounds; ++r) {
      Matcher m(g, {.stop_ids = {eos}});
      for (size_t i = 0; i <= ids.size(); ++i) {
        const auto a = Clock::now();
        m.fill_mask(mask);
        per_step[i].push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
        const uint32_t id = i < ids.size() ? ids[i] : eos;
        if (!((mask[id >> 5] >> (id & 31)) & 1) || !m.accept(id)) {
          std::fprintf(stderr, "%s: token %zu (%u '%s') refused\n", name.c_str(), i, id, std::string(vocab->bytes(id)).c_str());
          return 1;
        }
      }
    }
    std::vector<double> steps;
    for (const auto& s : per_step) steps.push_back(percentile(s, 0.5));
    all.insert(all.end(), steps.begin(), steps.end());
    std::printf("%-14s %7.0fms %6zu %9zu %6zu %9.1f %9.1f %9.1f\n", name.c_str(), ms, g->stats().positions,
                g->stats().uncertain_tokens, steps.size(), percentile(steps, 0.5), percentile(steps, 0.99),
                *std::max_element(steps.begin(), steps.end()));
  }
  std::printf("all steps: %zu, median %.1f us, p99 %.1f us, max %.1f us; compile median %.0f ms, max %.0f ms\n", all.size(),
              percentile(all, 0.5), percentile(all, 0.99), *std::max_element(all.begin(), all.end()),
              percentile(compile_ms, 0.5), *std::max_element(compile_ms.begin(), compile_ms.end()));
  return 0;
}
