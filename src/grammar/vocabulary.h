// A tokenizer vocabulary as the grammar matcher sees it: the bytes of each ordinary token id, the
// special token ids by name (matched only by grammar terminals <|name|>), and the mask width. The
// ordinary tokens are also kept as a byte trie in depth-first order, so that a walk over all
// tokens shares the work of common prefixes and skips a whole subtree once its prefix is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace k3::grammar {

class TokenVocabulary;

// Trie nodes in depth-first preorder (the root is implicit). Node i stands for a byte string of
// length depth[i] ending in byte[i]; its subtree is [i, end[i]); the tokens whose bytes are exactly
// that string are ids[tok_begin[i] .. tok_begin[i+1]).
struct TokenTrie {
  std::vector<uint8_t> byte;
  std::vector<uint16_t> depth;
  std::vector<uint32_t> end;
  std::vector<uint32_t> tok_begin;  // size() + 1 entries
  std::vector<uint32_t> ids;
  uint16_t max_depth = 0;

  size_t size() const { return byte.size(); }
  // The trie of the given ordinary token ids (any order, empty tokens left out).
  static TokenTrie build(std::vector<uint32_t> ids, const TokenVocabulary& vocab);
};

class TokenVocabulary {
 public:
  // ordinary[id] is the byte string of ordinary token id; ids named in `specials` are special
  // (their entries in `ordinary`, if any, are ignored). mask_size is the number of mask bits (the
  // model's logits width), at least every id given; 0 means exactly that. Ids that are neither
  // ordinary with non-empty bytes nor special are never allowed.
  TokenVocabulary(std::vector<std::string> ordinary, std::vector<SpecialToken> specials, uint32_t mask_size = 0);

  // The tokenizer's ordinary tokens and specials.
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(const Tokenizer& tokenizer, uint32_t mask_size = 0);

  uint32_t size() const { return size_; }
  std::string_view bytes(uint32_t id) const {
    return id + 1 < offsets_.size() ? std::string_view(data_).substr(offsets_[id], offsets_[id + 1] - offsets_[id])
                                    : std::string_view();
  }
  bool is_special(uint32_t id) const { return id < special_.size() && special_[id]; }
  std::optional<uint32_t> special_id(std::string_view name) const;
  // SHA-256 over the ordinary bytes, the specials and the size: the cache key of a vocabulary.
  const std::string& fingerprint() const { return fingerprint_; }
  const TokenTrie& trie() const { return trie_; }

 private:
  std::string data_;
  std::vector<uint32_t> offsets_;  // ordinary ids; specials have empty bytes
  std::vector<uint8_t> special_;
  std::unordered_map<std::string, uint32_t> special_ids_;
  uint32_t size_ = 0;
  std::string fingerprint_;
  TokenTrie trie_;
};

}  // namespace k3::grammar
