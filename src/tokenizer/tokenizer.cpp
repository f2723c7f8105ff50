#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"
#include "tokenizer/utf8.h"

namespace k3 {
namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with '=' padding; nullopt when malformed.
std::optional<std::string> base64_decode(std::string_view s) {
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  size_t pad = 0;
  while (pad < 2 && s[s.size() - 1 - pad] == '=') ++pad;
  std::string out;
  out.reserve(s.size() / 4 * 3);
  uint32_t acc = 0;
  for (size_t i = 0; i < s.size() - pad; ++i) {
    const int v = base64_value(s[i]);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    if (i % 4 == 3) {
      out += static_cast<char>(acc >> 16);
      out += static_cast<char>(acc >> 8);
      out += static_cast<char>(acc);
      acc = 0;
    }
  }
  if (pad == 1) {  // 3 symbols = 18 bits → 2 bytes; the low 2 bits must be zero
    if (acc & 3) return std::nullopt;
    out += static_cast<char>(acc >> 10);
    out += static_cast<char>(acc >> 2);
  } else if (pad == 2) {  // 2 symbols = 12 bits → 1 byte
    if (acc & 15) return std::nullopt;
    out += static_cast<char>(acc >> 4);
  }
  return out;
}

std::optional<uint32_t> parse_decimal(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v >= kNoRank) return std::nullopt;
  return static_cast<uint32_t>(v);
}

std::string read_text_file(const std::string& path) {
  auto file = File::open(path);
  auto bytes = file->read_range(0, file->size(), "whole file");
  return std::string(bytes.begin(), bytes.end());
}

std::string hex_byte(unsigned v) {
  static const char* digits = "0123456789ABCDEF";
  return std::string("0x") + digits[v >> 4] + digits[v & 15];
}

// Python str.isspace() (spec §2.1.2).
bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

std::vector<std::string> parse_tiktoken_model(std::string_view text, const std::string& path) {
  struct Line {
    std::string_view text;
    size_t number;
  };
  std::vector<Line> lines;
  size_t number = 0;
  for (size_t pos = 0; pos <= text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) lines.push_back({line, number});
    pos = end + 1;
  }
  auto fail = [&](size_t line, const std::string& msg) -> Error {
    return Error(Where{path, "", ""}, "line " + std::to_string(line) + ": " + msg);
  };
  std::vector<std::string> tokens(lines.size());
  std::vector<size_t> rank_line(lines.size(), 0);
  for (const Line& l : lines) {
    const size_t space = l.text.find(' ');
    if (space == std::string_view::npos || l.text.find(' ', space + 1) != std::string_view::npos)
      throw fail(l.number, "expected '<base64 bytes> <rank>'");
    auto bytes = base64_decode(l.text.substr(0, space));
    if (!bytes) throw fail(l.number, "invalid base64 " + quote_bytes(l.text.substr(0, space)));
    auto rank = parse_decimal(l.text.substr(space + 1));
    if (!rank) throw fail(l.number, "invalid rank " + quote_bytes(l.text.substr(space + 1)));
    if (*rank >= lines.size())
      throw fail(l.number, "rank " + std::to_string(*rank) + " out of range: ranks must be 0.." +
                               std::to_string(lines.size() - 1) + " for " + std::to_string(lines.size()) + " entries");
    if (rank_line[*rank] != 0)
      throw fail(l.number, "duplicate rank " + std::to_string(*rank) + " (first on line " +
                               std::to_string(rank_line[*rank]) + ")");
    rank_line[*rank] = l.number;
    tokens[*rank] = std::move(*bytes);
  }
  // Ranks are unique and all < N, so they are dense. Now the byte strings.
  RankTable table(tokens);
  for (uint32_t r = 0; r < tokens.size(); ++r) {
    const uint32_t first = table.find(tokens[r]);
    if (first != r) {
      const uint32_t a = std::min(first, r), b = std::max(first, r);
      throw fail(rank_line[b], "token bytes duplicate those of rank " + std::to_string(a) + " (line " +
                                   std::to_string(rank_line[a]) + ")");
    }
  }
  for (unsigned b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (table.find(std::string_view(&c, 1)) == kNoRank)
      throw Error(Where{path, "", ""}, "single byte " + hex_byte(b) + " has no rank (all 256 bytes are required)");
  }
  return tokens;
}

std::vector<SpecialToken> parse_special_tokens(std::string_view config_json, uint32_t num_base,
                                               const std::string& path) {
  const nlohmann::json config = parse_json_value<nlohmann::json>(config_json, Where{path, "", ""});
  if (!config.is_object()) throw Error(Where{path, "", ""}, "expected a JSON object");
  std::vector<SpecialToken> specials(Tokenizer::kNumSpecials);
  for (uint32_t i = 0; i < Tokenizer::kNumSpecials; ++i) {
    specials[i].id = num_base + i;
    specials[i].name = "<|reserved_token_" + std::to_string(num_base + i) + "|>";
  }
  if (config.contains("added_tokens_decoder")) {
    const auto& added = config["added_tokens_decoder"];
    if (!added.is_object()) throw Error(Where{path, "", "added_tokens_decoder"}, "expected an object");
    for (const auto& [key, entry] : added.items()) {
      auto id = parse_decimal(key);
      if (!id) throw Error(Where{path, "", "added_tokens_decoder"}, "key " + quote_bytes(key) + " is not a token id");
      const std::string field = "added_tokens_decoder." + key;
      if (*id < num_base || *id - num_base >= Tokenizer::kNumSpecials)
        throw Error(Where{path, "", field},
                    "unknown special token id " + key + ": special ids are " + std::to_string(num_base) + ".." +
                        std::to_string(num_base + Tokenizer::kNumSpecials - 1));
      if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string() ||
          entry["content"].get_ref<const std::string&>().empty())
        throw Error(Where{path, "", field + ".content"}, "expected a non-empty string");
      SpecialToken& t = specials[*id - num_base];
      t.name = entry["content"].get<std::string>();
      if (entry.contains("special")) {
        if (!entry["special"].is_boolean()) throw Error(Where{path, "", field + ".special"}, "expected a boolean");
        t.special = entry["special"].get<bool>();
      }
    }
  }
  std::unordered_map<std::string, uint32_t> seen;
  for (const auto& t : specials) {
    auto [it, fresh] = seen.emplace(t.name, t.id);
    if (!fresh)
      throw Error(Where{path, "", "added_tokens_decoder." + std::to_string(t.id)},
                  "special token name " + quote_bytes(t.name) + " already used by id " + std::to_string(it->second));
  }
  // Named roles must refer to registered specials.
  auto check_name = [&](const std::string& field, const nlohmann::json& v) {
    const nlohmann::json& name = v.is_object() && v.contains("content") ? v["content"] : v;
    if (name.is_null()) return;
    if (!name.is_string()) throw Error(Where{path, "", field}, "expected a token name");
    if (!seen.count(name.get<std::string>()))
      throw Error(Where{path, "", field}, "unknown special token " + quote_bytes(name.get_ref<const std::string&>()));
  };
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"})
    if (config.contains(key)) check_name(key, config[key]);
  if (config.contains("additional_special_tokens")) {
    const auto& extra = config["additional_special_tokens"];
    if (!extra.is_array()) throw Error(Where{path, "", "additional_special_tokens"}, "expected an array");
    for (size_t i = 0; i < extra.size(); ++i)
      check_name("additional_special_tokens[" + std::to_string(i) + "]", extra[i]);
  }
  return specials;
}

Tokenizer Tokenizer::load(const std::string& dir) {
  const std::string model_path = dir + "/tiktoken.model";
  const std::string config_path = dir + "/tokenizer_config.json";
  auto tokens = parse_tiktoken_model(read_text_file(model_path), model_path);
  auto specials = parse_special_tokens(read_text_file(config_path), static_cast<uint32_t>(tokens.size()), config_path);
  return Tokenizer(tokens, std::move(specials), kimi_pattern(), ChunkLimits::kimi());
}

Tokenizer::Tokenizer(const std::vector<std::string>& tokens, std::vector<SpecialToken> specials,
                     const std::string& pattern, ChunkLimits chunking)
    : bpe_((tokens.size() + specials.size() > Bpe::kMaxVocab)
               ? throw Error(Where{"", "", "vocabulary"}, std::to_string(tokens.size() + specials.size()) +
                                                              " tokens: at most " + std::to_string(Bpe::kMaxVocab) +
                                                              " are supported")
               : Bpe(tokens)),
      specials_(std::move(specials)),
      pretokenizer_(pattern),
      chunking_(chunking) {
  for (size_t i = 0; i < specials_.size(); ++i) {
    const SpecialToken& t = specials_[i];
    if (t.id != num_base() + i)
      throw Error(Where{"", "", "special tokens"}, "special token " + quote_bytes(t.name) + " has id " + std::to_string(t.id) +
                                                      ", expected " + std::to_string(num_base() + i));
    if (t.name.empty()) throw Error(Where{"", "", "special tokens"}, "empty special token name");
    special_ids_.emplace(t.name, t.id);
    special_first_byte_[static_cast<unsigned char>(t.name[0])] = true;
  }
}

std::optional<uint32_t> Tokenizer::find_special(std::string_view name) const {
  auto it = special_ids_.find(std::string(name));
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

uint32_t Tokenizer::special_id(std::string_view name) const {
  auto id = find_special(name);
  if (!id) throw Error(Where{"", "", "special tokens"}, "unknown special token " + quote_bytes(name));
  return *id;
}

std::pair<size_t, uint32_t> Tokenizer::find_special_in(std::string_view text, size_t pos) const {
  for (size_t p = pos; p < text.size(); ++p) {
    if (!special_first_byte_[static_cast<unsigned char>(text[p])]) continue;
    // Longest name starting here (no Kimi name is a prefix of another, so this is tiktoken's match).
    const SpecialToken* best = nullptr;
    for (const SpecialToken& t : specials_) {
      if (t.name.size() <= text.size() - p && (!best || t.name.size() > best->name.size()) &&
          std::memcmp(text.data() + p, t.name.data(), t.name.size()) == 0)
        best = &t;
    }
    if (best) return {p, best->id};
  }
  return {std::string_view::npos, 0};
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const {
  pretokenizer_.split(text, [&](std::string_view piece) { bpe_.encode(piece, out); });
}

void Tokenizer::encode_chunk(std::string_view chunk, Specials specials, std::vector<uint32_t>& out) const {
  if (specials == Specials::kNone) {
    encode_ordinary(chunk, out);
    return;
  }
  size_t pos = 0;
  while (pos < chunk.size()) {
    auto [at, id] = find_special_in(chunk, pos);
    if (at == std::string_view::npos) break;
    encode_ordinary(chunk.substr(pos, at - pos), out);
    out.push_back(id);
    pos = at + specials_[id - num_base()].name.size();
  }
  encode_ordinary(chunk.substr(pos), out);
}

void Tokenizer::encode(std::string_view text, Specials specials, std::vector<uint32_t>& out) const {
  const size_t bad = utf8::first_invalid(text);
  if (bad != std::string_view::npos)
    throw Error(Where{"", "", "text"}, "invalid UTF-8 at byte offset " + std::to_string(bad));
  if (chunking_.window == 0 && chunking_.run == 0) {
    encode_chunk(text, specials, out);
    return;
  }
  for (std::string_view chunk : chunk_text(text, chunking_)) encode_chunk(chunk, specials, out);
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text, Specials specials) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode(text, specials, out);
  return out;
}

std::string_view Tokenizer::token_bytes(uint32_t id) const {
  if (id < num_base()) return bpe_.ranks().bytes(id);
  if (id < n_vocab()) return specials_[id - num_base()].name;
  throw Error(Where{"", "", "ids"}, "token id " + std::to_string(id) + " out of range (n_vocab " +
                                        std::to_string(n_vocab()) + ")");
}

std::string Tokenizer::decode(std::span<const uint32_t> ids, SkipSpecial skip) const {
  std::string bytes;
  for (uint32_t id : ids) {
    const std::string_view b = token_bytes(id);
    if (skipped(id, skip)) continue;
    bytes.append(b);
  }
  return utf8::replace_invalid(bytes);
}

std::vector<std::string_view> chunk_text(std::string_view text, ChunkLimits limits) {
  std::vector<std::string_view> out;
  // Windows of `window` code points.
  std::vector<std::string_view> windows;
  if (limits.window == 0) {
    windows.push_back(text);
  } else {
    size_t start = 0, i = 0, count = 0;
    while (i < text.size()) {
      if (count == limits.window) {
        windows.push_back(text.substr(start, i - start));
        start = i;
        count = 0;
      }
      utf8::next(text, i);
      ++count;
    }
    if (i > start) windows.push_back(text.substr(start));
  }
  for (std::string_view w : windows) {
    if (limits.run == 0 || w.empty()) {
      out.push_back(w);
      continue;
    }
    size_t start = 0, i = 0, run = 0;
    bool space = false;
    while (i < w.size()) {
      const size_t here = i;
      const bool now = py_isspace(utf8::next(w, i));
      if (here == 0 || now != space) {
        run = 1;
        space = now;
      } else if (++run > limits.run) {
        out.push_back(w.substr(start, here - start));
        start = here;
        run = 1;
      }
    }
    out.push_back(w.substr(start));
  }
  return out;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, SkipSpecial skip, std::span<const std::string> kept)
    : tokenizer_(tokenizer), skip_(skip) {
  for (const std::string& name : kept) {
    const std::optional<uint32_t> id = tokenizer_.find_special(name);
    if (!id) continue;
    kept_.resize(tokenizer_.n_vocab() - tokenizer_.num_base());
    kept_[*id - tokenizer_.num_base()] = true;
  }
}

std::string StreamDecoder::push(uint32_t id) {
  const std::string_view bytes = tokenizer_.token_bytes(id);
  if (!tokenizer_.is_special_id(id)) return utf8_.push(bytes);
  const bool kept = !kept_.empty() && kept_[id - tokenizer_.num_base()];
  if (!kept && tokenizer_.skipped(id, skip_)) return {};  // as decode: not there at all
  std::string out = utf8_.flush();
  out.append(bytes);
  return out;
}

std::string StreamDecoder::finish() { return utf8_.flush(); }

}  // namespace k3
