#include "grammar_test_util.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tiny_vocab.h"

namespace k3::grammar::test {
namespace {

const char* kSpecialNames[] = {"[BOS]", "[EOS]", "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};

const char* kExtra[] = {
    "{\"", "\":", "\",", "\"}", "},", "}]", "]}", "\":\"", "\": \"", "\", \"", "{\n", "\n  ", "\n    ", "\n}", ",\n",
    " \"", "\"\n", "true", "false", "null", "nul", "12", "3.", ".5", "e+", "-1", "00", "\\u", "\\n", "\\\"", "\\\\",
    "é", "ü", "中文", "你好", "😀", "\xC3", "\xE4\xB8", "\xB8\xAD", "\x80", "\xA9x", "name", "age", "id", "\"name",
    "abc", "xyz", "[{", "[\"", "\"]", "  ", "   ", "    ", "\t", "\n\n", "<|", "|>", "open", "2024-", "-01-", "T12:",
    ":00", "Z\"", "@example", ".com", "0123", "456789", "abcdef", "-4", "ab\"", "a\\", "\":[", "\":{", "[]", "{}",
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::shared_ptr<const TokenVocabulary> small_vocab() {
  static const std::shared_ptr<const TokenVocabulary> vocab = [] {
    std::vector<std::string> tokens = make_tiny_vocab(400);
    for (const char* e : kExtra)
      if (std::find(tokens.begin(), tokens.end(), e) == tokens.end()) tokens.push_back(e);
    std::vector<SpecialToken> specials;
    for (const char* name : kSpecialNames) specials.push_back({name, static_cast<uint32_t>(tokens.size() + specials.size()), true});
    return std::make_shared<const TokenVocabulary>(tokens, specials);
  }();
  return vocab;
}

uint32_t small_special(std::string_view name) { return *small_vocab()->special_id(name); }

std::vector<uint32_t> tokenize_longest(const TokenVocabulary& vocab, std::string_view text) {
  const TokenTrie& trie = vocab.trie();
  std::vector<uint32_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    // Descend the trie along text, remembering the deepest node where a token ends.
    uint32_t best = UINT32_MAX;
    size_t best_len = 0;
    size_t i = 0, depth = 0;
    while (i < trie.size() && pos + depth < text.size()) {
      if (trie.depth[i] != depth + 1) break;
      if (trie.byte[i] == static_cast<uint8_t>(text[pos + depth])) {
        ++depth;
        if (trie.tok_begin[i] != trie.tok_begin[i + 1]) {
          best = trie.ids[trie.tok_begin[i]];
          best_len = depth;
        }
        ++i;  // first child, if any
      } else {
        i = trie.end[i];  // next sibling
      }
    }
    if (best == UINT32_MAX) throw std::runtime_error("text byte has no token");
    out.push_back(best);
    pos += best_len;
  }
  return out;
}

const Reference* reference_vocab() {
  static const std::unique_ptr<Reference> ref = []() -> std::unique_ptr<Reference> {
    namespace fs = std::filesystem;
    fs::path dir = std::getenv("K3_TOKENIZER_REFERENCE") ? fs::path(std::getenv("K3_TOKENIZER_REFERENCE"))
                                                         : fs::path(K3_SOURCE_DIR) / "build/tokenizer-reference";
    if (!fs::exists(dir / "tiktoken.model") || !fs::exists(dir / "specials.txt")) return nullptr;
    auto r = std::make_unique<Reference>();
    const auto tokens = parse_tiktoken_model(slurp(dir / "tiktoken.model"), (dir / "tiktoken.model").string());
    std::vector<SpecialToken> specials;
    std::istringstream names(slurp(dir / "specials.txt"));
    for (std::string name; std::getline(names, name);)
      specials.push_back({name, static_cast<uint32_t>(tokens.size() + specials.size()), true});
    r->tokenizer = std::make_unique<Tokenizer>(tokens, std::move(specials), kimi_pattern());
    r->vocab = TokenVocabulary::from_tokenizer(*r->tokenizer);
    r->eos = r->tokenizer->special_id("[EOS]");
    return r;
  }();
  return ref.get();
}

std::vector<uint32_t> brute_mask(const Matcher& m) {
  const uint32_t n = m.grammar().vocab().size();
  std::vector<uint32_t> mask(m.mask_words(), 0);
  for (uint32_t id = 0; id < n; ++id) {
    Matcher copy = m;
    if (copy.accept(id)) mask[id >> 5] |= 1u << (id & 31);
  }
  return mask;
}

std::vector<uint32_t> fast_mask(const Matcher& m) {
  std::vector<uint32_t> mask(m.mask_words(), 0xDEADBEEF);
  m.fill_mask(mask);
  return mask;
}

std::vector<uint32_t> allowed_ids(const std::vector<uint32_t>& mask, uint32_t vocab_size) {
  std::vector<uint32_t> out;
  for (uint32_t id = 0; id < vocab_size; ++id)
    if ((mask[id >> 5] >> (id & 31)) & 1) out.push_back(id);
  return out;
}

std::optional<std::string> constrained_walk(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937& rng,
                                            size_t free_steps, uint32_t stop_id, size_t max_steps) {
  Matcher m(g, {{stop_id}});
  std::string text;
  const TokenVocabulary& vocab = g->vocab();
  for (size_t step = 0; step < max_steps; ++step) {
    const std::vector<uint32_t> ids = allowed_ids(fast_mask(m), vocab.size());
    if (ids.empty()) return std::nullopt;
    uint32_t pick;
    if (step < free_steps) {
      pick = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
    } else {
      // Toward the end: the stop when allowed, else the token leaving the fewest bytes to finish.
      pick = ids[0];
      size_t best = SIZE_MAX;
      for (uint32_t id : ids) {
        if (id == stop_id) {
          pick = id;
          break;
        }
        Matcher copy = m;
        copy.accept(id);
        const size_t left = copy.min_remaining_bytes() * 4 + (std::uniform_int_distribution<size_t>(0, 3)(rng));
        if (left < best) {
          best = left;
          pick = id;
        }
      }
    }
    if (!m.accept(pick)) return std::nullopt;
    if (m.is_terminated()) return text;
    if (vocab.is_special(pick)) {
      text += "<special>";
    } else {
      text += vocab.bytes(pick);
    }
  }
  return std::nullopt;
}

}  // namespace k3::grammar::test
