// k3 vs the npm `tiktoken` package (Rust tiktoken core): o200k_base ranks + Kimi pattern + 256
// specials on ≥ 1 MB of mixed-script text, specials as text and allowed. The data comes from
// scripts/tokenizer_reference.sh (run by scripts/test.sh); without it the tests skip.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

fs::path reference_dir() {
  if (const char* env = std::getenv("K3_TOKENIZER_REFERENCE")) return env;
  return fs::path(__FILE__).parent_path() / "../../build/tokenizer-reference";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint32_t read_u32(const std::string& data, size_t& pos) {
  uint32_t v;
  std::memcpy(&v, data.data() + pos, 4);
  pos += 4;
  return v;
}

struct Reference {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::string> docs;
  std::vector<std::vector<uint32_t>> ids_none, ids_all;
};

std::vector<std::vector<uint32_t>> read_ids(const std::string& data) {
  std::vector<std::vector<uint32_t>> out;
  for (size_t pos = 0; pos < data.size();) {
    const uint32_t n = read_u32(data, pos);
    std::vector<uint32_t> ids(n);
    if (n) std::memcpy(ids.data(), data.data() + pos, n * 4ull);
    pos += n * 4ull;
    out.push_back(std::move(ids));
  }
  return out;
}

const Reference* reference() {
  static std::unique_ptr<Reference> ref = []() -> std::unique_ptr<Reference> {
    const fs::path dir = reference_dir();
    if (!fs::exists(dir / "ids_all.bin")) return nullptr;
    auto r = std::make_unique<Reference>();
    const auto tokens = parse_tiktoken_model(slurp(dir / "tiktoken.model"), (dir / "tiktoken.model").string());
    std::vector<SpecialToken> specials;
    std::istringstream names(slurp(dir / "specials.txt"));
    for (std::string name; std::getline(names, name);)
      specials.push_back({name, static_cast<uint32_t>(tokens.size() + specials.size()), true});
    r->tokenizer = std::make_unique<Tokenizer>(tokens, std::move(specials), kimi_pattern());
    const std::string docs = slurp(dir / "docs.bin");
    for (size_t pos = 0; pos < docs.size();) {
      const uint32_t n = read_u32(docs, pos);
      r->docs.push_back(docs.substr(pos, n));
      pos += n;
    }
    r->ids_none = read_ids(slurp(dir / "ids_none.bin"));
    r->ids_all = read_ids(slurp(dir / "ids_all.bin"));
    return r;
  }();
  return ref.get();
}

#define REQUIRE_REFERENCE()                                                                          \
  const Reference* ref = reference();                                                                \
  if (!ref)                                                                                          \
    GTEST_SKIP() << "no tokenizer reference data in " << reference_dir()                             \
                 << ": run scripts/tokenizer_reference.sh (needs node + the npm package tiktoken)"

void compare(const Reference& ref, Specials mode, const std::vector<std::vector<uint32_t>>& expected) {
  ASSERT_EQ(ref.docs.size(), expected.size());
  size_t bytes = 0, mismatches = 0;
  for (size_t i = 0; i < ref.docs.size(); ++i) {
    bytes += ref.docs[i].size();
    const auto ids = ref.tokenizer->encode(ref.docs[i], mode);
    if (ids != expected[i] && ++mismatches <= 5) ADD_FAILURE() << "document " << i << " differs: " << ref.docs[i].substr(0, 200);
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_GE(bytes, 1000000u);
}

TEST(TokenizerReference, O200kRanksKimiPatternSpecialsAsText) {
  REQUIRE_REFERENCE();
  compare(*ref, Specials::kNone, ref->ids_none);
}

TEST(TokenizerReference, O200kRanksKimiPatternSpecialsAllowed) {
  REQUIRE_REFERENCE();
  compare(*ref, Specials::kAll, ref->ids_all);
}

TEST(TokenizerReference, DecodeRestoresEveryDocument) {
  REQUIRE_REFERENCE();
  for (size_t i = 0; i < ref->docs.size(); ++i) ASSERT_EQ(ref->tokenizer->decode(ref->ids_all[i]), ref->docs[i]) << i;
}

}  // namespace
}  // namespace k3
