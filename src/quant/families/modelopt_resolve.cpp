#include "quant/families/modelopt_resolve.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace k3::modelopt {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string last_segment(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

std::vector<std::string> segments(const std::string& name) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', start)) {
    out.push_back(name.substr(start, dot - start));
    start = dot + 1;
  }
  out.push_back(name.substr(start));
  return out;
}

// s with the first ".from." replaced by ".to." (or unchanged).
std::string swap_segment(const std::string& s, const std::string& from, const std::string& to) {
  const auto pos = s.find("." + from + ".");
  if (pos == std::string::npos) return s;
  return s.substr(0, pos + 1) + to + s.substr(pos + 1 + from.size());
}

// Patterns ending in these MLA projection names also exclude fused modules containing the name.
constexpr const char* kFusedMlaTails[] = {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"};

}  // namespace

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::optional<std::string> known_algo(const std::string& written) {
  const std::string a = upper(written);
  for (const char* k : kKnownAlgos) {
    if (a == k) return a;
  }
  return std::nullopt;
}

std::string known_algos_text() {
  std::string s;
  const size_t n = std::size(kKnownAlgos);
  for (size_t i = 0; i < n; ++i) s += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + kKnownAlgos[i];
  return s;
}

std::vector<std::string> module_spellings(const std::string& module) {
  std::vector<std::string> base{module};
  if (starts_with(module, "language_model.")) {
    base.push_back(module.substr(15));
  } else {
    base.push_back("language_model." + module);
  }
  for (const std::string& b : std::vector<std::string>(base)) {
    if (starts_with(b, "model.")) base.push_back(b.substr(6));
  }
  std::vector<std::string> out;
  auto add = [&out](const std::string& s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  for (const std::string& b : base) add(b);
  for (const std::string& b : base) {
    add(swap_segment(b, "block_sparse_moe", "mlp"));
    add(swap_segment(b, "mlp", "block_sparse_moe"));
  }
  return out;
}

bool glob_full_match(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p;
      ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

const std::vector<PackedModule>& k3_packed_modules() {
  static const std::vector<PackedModule> kPacked{
      {"gate_up_proj", {"gate_proj", "up_proj"}},
      {"qkv_proj", {"q_proj", "k_proj", "v_proj"}},
      {"qkv_conv1d", {"q_conv1d", "k_conv1d", "v_conv1d"}},
      {"fused_qkvg_proj", {"q_proj", "k_proj", "v_proj", "g_proj"}},
      {"fused_qkvbfg_a_proj", {"q_proj", "k_proj", "v_proj", "b_proj", "f_a_proj", "g_a_proj"}},
      {"fused_fg_b_proj", {"f_b_proj", "g_b_proj"}},
      {"fused_qkv_a_proj_with_mqa", {"q_a_proj", "kv_a_proj_with_mqa"}},
  };
  return kPacked;
}

Resolver::Resolver(std::vector<ModelOptLayer> quantized_layers, std::vector<std::string> exclude_modules)
    : layers_(std::move(quantized_layers)), exclude_(std::move(exclude_modules)) {}

bool Resolver::excluded(const std::string& module) const {
  const std::vector<std::string> names = module_spellings(module);
  const std::string leaf = last_segment(module);
  for (const std::string& pattern : exclude_) {
    for (const std::string& name : names) {
      if (glob_full_match(pattern, name)) return true;
      for (const std::string& part : segments(name)) {
        if (glob_full_match(pattern, part)) return true;
      }
    }
    const std::string tail = last_segment(pattern);
    for (const char* mla : kFusedMlaTails) {
      if (tail == mla && leaf.find(tail) != std::string::npos) return true;
    }
  }
  return false;
}

std::optional<std::string> Resolver::direct(const std::string& module) const {
  const std::vector<std::string> names = module_spellings(module);
  const ModelOptLayer* found = nullptr;
  for (const ModelOptLayer& layer : layers_) {
    if (std::find(names.begin(), names.end(), layer.module) == names.end()) continue;
    if (found != nullptr && upper(found->quant_algo) != upper(layer.quant_algo)) {
      throw Error("quant_algo of module '" + module + "' differs between its spellings: '" + found->module + "' is " +
                  found->quant_algo + ", '" + layer.module + "' is " + layer.quant_algo);
    }
    if (found == nullptr) found = &layer;
  }
  if (found == nullptr) return std::nullopt;
  return upper(found->quant_algo);
}

std::optional<std::string> Resolver::subtree(const std::string& module) const {
  const std::vector<std::string> names = module_spellings(module);
  for (const ModelOptLayer& layer : layers_) {
    for (const std::string& name : names) {
      if (starts_with(layer.module, name + ".")) return upper(layer.quant_algo);
    }
  }
  return std::nullopt;
}

std::optional<std::string> Resolver::resolve(const std::string& module) const {
  if (auto a = direct(module)) return a;
  return subtree(module);
}

void Resolver::check_fused(const std::string& base, const PackedModule& packed,
                           const std::vector<std::string>& present_shards) const {
  const std::string fused = base + "." + packed.fused;
  std::vector<std::string> excluded_shards, kept_shards;
  for (const std::string& shard : present_shards) (excluded(base + "." + shard) ? excluded_shards : kept_shards).push_back(shard);
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (!excluded_shards.empty() && !kept_shards.empty()) {
    throw Error("Some but not all shards of fused layer '" + fused + "' are excluded (excluded: " + list(excluded_shards) +
                "; quantizable: " + list(kept_shards) + "). All shards must use the same precision.");
  }
  if (kept_shards.empty()) return;
  std::vector<std::pair<std::string, std::string>> algos;  // (label, algo or "none")
  if (auto a = direct(fused)) algos.emplace_back(packed.fused, *a);
  for (const std::string& shard : kept_shards) algos.emplace_back(shard, resolve(base + "." + shard).value_or("none"));
  for (const auto& [label, algo] : algos) {
    if (algo == algos.front().second) continue;
    std::string detail;
    for (const auto& [l, a] : algos) detail += (detail.empty() ? "" : ", ") + l + ": " + a;
    throw Error("Mixed quant_algo within fused layer '" + fused + "' (" + detail +
                "). All shards must use the same quantization.");
  }
}

}  // namespace k3::modelopt
