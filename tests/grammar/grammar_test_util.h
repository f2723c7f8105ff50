// Shared helpers for the grammar tests: a small vocabulary built to stress the matcher (JSON
// punctuation merged with text, partial UTF-8, whitespace runs, specials), the real-size reference
// vocabulary when scripts/tokenizer_reference.sh has made it, and a brute-force mask.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace k3::grammar::test {

inline constexpr uint32_t kEos = 1;  // a special id of the small vocabulary used as the stop id

// 256 single bytes, then a few hundred multi-byte tokens, then specials ([BOS], [EOS], <|open|>,
// <|close|>, <|sep|>, <|end_of_msg|>).
std::shared_ptr<const TokenVocabulary> small_vocab();
uint32_t small_special(std::string_view name);

// Greedy longest-match tokenization with any vocabulary (valid: every byte is a token).
std::vector<uint32_t> tokenize_longest(const TokenVocabulary& vocab, std::string_view text);

struct Reference {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const TokenVocabulary> vocab;
  uint32_t eos = 0;
};
// The o200k stand-in (nullptr when absent).
const Reference* reference_vocab();

// bit i of the result = accepting token i on a copy of m succeeds.
std::vector<uint32_t> brute_mask(const Matcher& m);
std::vector<uint32_t> fast_mask(const Matcher& m);
std::vector<uint32_t> allowed_ids(const std::vector<uint32_t>& mask, uint32_t vocab_size);

// Random constrained generation: random allowed tokens for `free_steps`, then the allowed token
// that leaves the fewest bytes to finish; stops at the first allowed stop. Returns the text, or
// nullopt when a mask came out empty before the end.
std::optional<std::string> constrained_walk(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937& rng,
                                            size_t free_steps, uint32_t stop_id, size_t max_steps = 4000);

}  // namespace k3::grammar::test
