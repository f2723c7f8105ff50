#include "grammar/vocabulary.h"

#include <algorithm>

#include "core/error.h"
#include "core/sha256.h"

namespace k3::grammar {

TokenTrie TokenTrie::build(std::vector<uint32_t> ids, const TokenVocabulary& vocab) {
  ids.erase(std::remove_if(ids.begin(), ids.end(), [&](uint32_t id) { return vocab.bytes(id).empty(); }), ids.end());
  std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
    const auto x = vocab.bytes(a), y = vocab.bytes(b);
    return x != y ? x < y : a < b;
  });
  TokenTrie t;
  t.ids = ids;
  std::vector<uint32_t> open;     // node index at each depth - 1 of the current path
  std::vector<uint32_t> node_of;  // the node where each sorted id ends (nondecreasing)
  std::string_view prev;
  for (uint32_t k = 0; k < ids.size(); ++k) {
    const std::string_view s = vocab.bytes(ids[k]);
    if (s.size() > UINT16_MAX) throw Error("token " + std::to_string(ids[k]) + " is longer than 65535 bytes");
    if (k > 0 && s == prev) {  // the same bytes as the previous id
      node_of.push_back(node_of.back());
      continue;
    }
    size_t lcp = 0;
    while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) ++lcp;
    while (open.size() > lcp) {
      t.end[open.back()] = static_cast<uint32_t>(t.byte.size());
      open.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {  // sorted order: s is never a prefix of prev
      open.push_back(static_cast<uint32_t>(t.byte.size()));
      t.byte.push_back(static_cast<uint8_t>(s[d]));
      t.depth.push_back(static_cast<uint16_t>(d + 1));
      t.end.push_back(0);
    }
    node_of.push_back(static_cast<uint32_t>(t.byte.size() - 1));
    t.max_depth = std::max<uint16_t>(t.max_depth, static_cast<uint16_t>(s.size()));
    prev = s;
  }
  while (!open.empty()) {
    t.end[open.back()] = static_cast<uint32_t>(t.byte.size());
    open.pop_back();
  }
  const size_t n = t.byte.size();
  t.tok_begin.assign(n + 1, 0);
  size_t k = 0;
  for (size_t i = 0; i <= n; ++i) {
    while (k < node_of.size() && node_of[k] < i) ++k;
    t.tok_begin[i] = static_cast<uint32_t>(k);
  }
  return t;
}

TokenVocabulary::TokenVocabulary(std::vector<std::string> ordinary, std::vector<SpecialToken> specials,
                                 uint32_t mask_size) {
  uint32_t n = static_cast<uint32_t>(ordinary.size());
  for (const SpecialToken& s : specials) n = std::max(n, s.id + 1);
  if (mask_size != 0 && mask_size < n)
    throw Error("grammar vocabulary: mask size " + std::to_string(mask_size) + " is below the " + std::to_string(n) +
                " token ids");
  size_ = mask_size ? mask_size : n;
  special_.assign(size_, 0);
  for (const SpecialToken& s : specials) {
    special_[s.id] = 1;
    special_ids_[s.name] = s.id;
  }
  offsets_.reserve(ordinary.size() + 1);
  offsets_.push_back(0);
  for (uint32_t id = 0; id < ordinary.size(); ++id) {
    if (!special_[id]) data_ += ordinary[id];
    offsets_.push_back(static_cast<uint32_t>(data_.size()));
  }
  Sha256 h;
  h.update(std::to_string(size_) + ":" + std::to_string(ordinary.size()) + ":");
  for (uint32_t id = 0; id + 1 < offsets_.size(); ++id) {
    const uint32_t len = offsets_[id + 1] - offsets_[id];
    h.update(std::string_view(reinterpret_cast<const char*>(&len), 4));
  }
  h.update(data_);
  for (const SpecialToken& s : specials) h.update(std::to_string(s.id) + "=" + s.name + "\n");
  fingerprint_ = to_hex(h.finish());
  std::vector<uint32_t> ids(ordinary.size());
  for (uint32_t id = 0; id < ids.size(); ++id) ids[id] = id;
  trie_ = TokenTrie::build(std::move(ids), *this);
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer, uint32_t mask_size) {
  std::vector<std::string> ordinary(tokenizer.num_base());
  for (uint32_t id = 0; id < ordinary.size(); ++id) ordinary[id] = tokenizer.token_bytes(id);
  std::vector<SpecialToken> specials;
  for (uint32_t id = tokenizer.num_base(); id < tokenizer.n_vocab(); ++id) specials.push_back(tokenizer.special(id));
  return std::make_shared<const TokenVocabulary>(std::move(ordinary), std::move(specials), mask_size);
}

std::optional<uint32_t> TokenVocabulary::special_id(std::string_view name) const {
  const auto it = special_ids_.find(std::string(name));
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

}  // namespace k3::grammar
