// A small deterministic byte-level vocabulary for tiny test models (`k3 make-tiny`): the 256 single
// bytes, then merges learned greedily from a fixed built-in English/code/CJK sample (most frequent
// adjacent pair within Kimi pre-tokens first, ties to the smaller byte string), until vocab_size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

// Token bytes by rank; vocab_size counts ordinary tokens only (the 256 specials come on top).
// Throws k3::Error when vocab_size < 256.
std::vector<std::string> make_tiny_vocab(uint32_t vocab_size);

// Writes DIR/tiktoken.model and DIR/tokenizer_config.json (K3 named specials at num_base..) so that
// Tokenizer::load(DIR) works; the directory must exist.
void write_tiny_tokenizer(const std::string& dir, uint32_t vocab_size);

}  // namespace k3
