#include "quant/families/checkpoint_writer.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/numeric.h"
#include "quant/families/tensor_binder.h"

namespace k3 {
namespace fs = std::filesystem;

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool stored_as_f32(const std::string& name) {
  return ends_with(name, "conv1d.weight") || ends_with(name, ".A_log") || ends_with(name, ".dt_bias") ||
         ends_with(name, "self_attn.o_norm.weight");
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw Error(Where{path, "", ""}, "cannot write file");
}
}  // namespace

std::string stored_tensor_name(const K3Config& config, const std::string& logical) {
  if (config.model_type == ModelType::kKimiK3) return "language_model." + logical;
  const auto pos = logical.find(".mlp.");
  if (pos != std::string::npos) return logical.substr(0, pos) + ".block_sparse_moe." + logical.substr(pos + 5);
  return logical;
}

std::vector<uint8_t> f32_bytes(const float* v, size_t n) {
  std::vector<uint8_t> out(n * 4);
  std::memcpy(out.data(), v, out.size());
  return out;
}

std::vector<uint8_t> bf16_bytes(const float* v, size_t n) {
  std::vector<uint8_t> out(n * 2);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t b = encode_bf16(v[i]);
    std::memcpy(out.data() + 2 * i, &b, 2);
  }
  return out;
}

void ShardedCheckpointWriter::add(std::string name, Dtype dtype, std::vector<uint64_t> shape, std::vector<uint8_t> bytes) {
  tensors_.push_back({std::move(name), dtype, std::move(shape), std::move(bytes)});
}

void ShardedCheckpointWriter::write(const std::string& dir, int shards) const {
  fs::create_directories(dir);
  if (shards <= 1) {
    SafetensorsWriter w;
    for (const auto& t : tensors_) w.add(t.name, t.dtype, t.shape, t.bytes);
    w.set_metadata("format", "pt");
    w.write((fs::path(dir) / "model.safetensors").string());
    return;
  }
  uint64_t total = 0;
  for (const auto& t : tensors_) total += t.bytes.size();
  std::map<std::string, std::string> weight_map;
  uint64_t written = 0;
  size_t next = 0;
  for (int s = 1; s <= shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s, shards);
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    // Fill shards by bytes, in insertion order: a module's tensors may straddle two shards.
    const uint64_t target = total * static_cast<uint64_t>(s) / static_cast<uint64_t>(shards);
    while (next < tensors_.size() && (written < target || s == shards)) {
      const auto& t = tensors_[next++];
      w.add(t.name, t.dtype, t.shape, t.bytes);
      weight_map[t.name] = name;
      written += t.bytes.size();
    }
    w.write((fs::path(dir) / name).string());
  }
  write_safetensors_index((fs::path(dir) / "model.safetensors.index.json").string(), weight_map, total);
}

void add_unquantized(ShardedCheckpointWriter& out, const MasterWeights& master, const ParamSpec& spec, Dtype dtype) {
  const K3Config& c = master.config;
  const std::vector<float>& v = master.at(spec.name);
  const Dtype d = stored_as_f32(spec.name) ? Dtype::F32 : dtype;
  auto bytes = [d](const float* p, size_t n) { return d == Dtype::F32 ? f32_bytes(p, n) : bf16_bytes(p, n); };
  if (spec.kind == ParamKind::ExpertBank) {
    const uint64_t per = spec.shape[1] * spec.shape[2];
    for (uint64_t e = 0; e < spec.shape[0]; ++e) {
      out.add(stored_tensor_name(c, expert_tensor_name(spec.name, static_cast<int64_t>(e), "weight")), d,
              {spec.shape[1], spec.shape[2]}, bytes(v.data() + e * per, per));
    }
    return;
  }
  if (ends_with(spec.name, ".A_log")) {
    if (c.model_type == ModelType::kKimiK3) {
      std::vector<float> padded(static_cast<size_t>(c.kda.head_dim), 0.0f);
      std::copy(v.begin(), v.end(), padded.begin());
      out.add(stored_tensor_name(c, spec.name), d, {padded.size()}, bytes(padded.data(), padded.size()));
    } else {
      out.add(stored_tensor_name(c, spec.name), d, {1, 1, v.size(), 1}, bytes(v.data(), v.size()));
    }
    return;
  }
  out.add(stored_tensor_name(c, spec.name), d, spec.shape, bytes(v.data(), v.size()));
}

void write_config_files(const std::string& dir, const Json& config_doc) {
  fs::create_directories(dir);
  write_text((fs::path(dir) / "config.json").string(), config_doc.dump(2) + "\n");
  Json gen = {{"do_sample", false}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    if (config_doc.contains(key)) gen[key] = config_doc[key];
  }
  write_text((fs::path(dir) / "generation_config.json").string(), gen.dump(2) + "\n");
}

}  // namespace k3
