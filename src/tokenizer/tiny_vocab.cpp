#include "tokenizer/tiny_vocab.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"

namespace k3 {
namespace {

const char* kSample =
    "The quick brown fox jumps over the lazy dog. Hello world! This is a tiny tokenizer for tests of the k3 engine.\n"
    "def get_user_name(user):\n    return user.name  # camelCase getUserName\n"
    "for (int i = 0; i < n; ++i) { total += value[i]; }\n"
    "<|open|>message role=\"user\"<|sep|>What is 2+2?<|close|>message<|sep|>\n"
    "中文和English混合的文本。你好，世界！日本語のテキスト。 1234567890 3.14159 😀👍\n"
    "the model the token the layer the cache and the weights of the experts in the network\n";

std::string base64(const std::string& bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? alphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? alphabet[v & 63] : '=';
  }
  return out;
}

}  // namespace

std::vector<std::string> make_tiny_vocab(uint32_t vocab_size) {
  if (vocab_size < 256) throw Error(Where{"", "", "vocab_size"}, "must be at least 256 (all single bytes)");
  std::vector<std::string> tokens;
  for (unsigned b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  // Each pre-token as a sequence of parts; merge the most frequent pair everywhere.
  std::vector<std::vector<std::string>> words;
  for (auto piece : Pretokenizer(kimi_pattern()).split(kSample)) {
    std::vector<std::string> parts;
    for (char c : piece) parts.emplace_back(1, c);
    words.push_back(std::move(parts));
  }
  std::set<std::string> known(tokens.begin(), tokens.end());
  while (tokens.size() < vocab_size) {
    std::map<std::pair<std::string, std::string>, size_t> counts;
    for (const auto& w : words)
      for (size_t i = 0; i + 1 < w.size(); ++i) ++counts[{w[i], w[i + 1]}];
    const std::pair<std::string, std::string>* best = nullptr;
    size_t best_count = 0;
    for (const auto& [pair, count] : counts) {
      if (count > best_count && !known.count(pair.first + pair.second)) {
        best = &pair;
        best_count = count;
      }
    }
    if (!best) break;  // the sample is exhausted: pad below
    const std::string merged = best->first + best->second;
    const auto [a, b] = *best;
    for (auto& w : words) {
      std::vector<std::string> next;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(w[i]);
        }
      }
      w = std::move(next);
    }
    tokens.push_back(merged);
    known.insert(merged);
  }
  // Pad with two-letter lowercase tokens if the sample ran out of merges.
  for (unsigned x = 0; tokens.size() < vocab_size; ++x) {
    std::string t = {static_cast<char>('a' + x / 26 % 26), static_cast<char>('a' + x % 26)};
    if (x >= 26 * 26) t += std::to_string(x);
    if (known.insert(t).second) tokens.push_back(t);
  }
  return tokens;
}

void write_tiny_tokenizer(const std::string& dir, uint32_t vocab_size) {
  const auto tokens = make_tiny_vocab(vocab_size);
  const std::string model_path = dir + "/tiktoken.model";
  std::ofstream model(model_path, std::ios::binary);
  for (size_t r = 0; r < tokens.size(); ++r) model << base64(tokens[r]) << ' ' << r << '\n';
  if (!model.good()) throw Error(Where{model_path, "", ""}, "cannot write");
  // K3's named specials (tokenizer spec §1.3), then the Kimi-Linear chat markers so that tiny models
  // of either architecture can render their chat format, at offsets from num_base.
  struct Named {
    uint32_t offset;
    const char* name;
    bool special;
  };
  const Named named[] = {{0, "[BOS]", true},
                         {1, "[EOS]", true},
                         {2, "<|end_of_msg|>", true},
                         {3, "<|open|>", false},
                         {4, "<|close|>", false},
                         {5, "<|sep|>", false},
                         {6, "<|im_system|>", false},
                         {7, "<|im_user|>", false},
                         {8, "<|im_assistant|>", false},
                         {9, "<|im_middle|>", false},
                         {10, "<|im_end|>", false},
                         {11, "<|tool_calls_section_begin|>", false},
                         {12, "<|tool_calls_section_end|>", false},
                         {13, "<|tool_call_begin|>", false},
                         {14, "<|tool_call_argument_begin|>", false},
                         {15, "<|tool_call_end|>", false},
                         {254, "[UNK]", true},
                         {255, "[PAD]", true}};
  nlohmann::ordered_json added = nlohmann::ordered_json::object();
  for (const auto& n : named)
    added[std::to_string(vocab_size + n.offset)] = {{"content", n.name}, {"special", n.special}};
  const nlohmann::ordered_json config = {{"tokenizer_class", "TikTokenTokenizer"},
                                         {"bos_token", "[BOS]"},
                                         {"eos_token", "[EOS]"},
                                         {"unk_token", "[UNK]"},
                                         {"pad_token", "[PAD]"},
                                         {"additional_special_tokens", {"<|end_of_msg|>"}},
                                         {"clean_up_tokenization_spaces", false},
                                         {"added_tokens_decoder", added}};
  const std::string config_path = dir + "/tokenizer_config.json";
  std::ofstream out(config_path);
  out << config.dump(2) << '\n';
  if (!out.good()) throw Error(Where{config_path, "", ""}, "cannot write");
}

}  // namespace k3
