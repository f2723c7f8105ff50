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
#pragma omp parallel for schedule(static) if (n >= (size_t{1} << 20))
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
    const uint16_t b = encode_bf16(v[i]);
    std::memcpy(out.data() + 2 * i, &b, 2);
  }
  return out;
}

// ---- ShardedSafetensorsSink --------------------------------------------------------------------

size_t ShardedSafetensorsSink::declare(std::string name, Dtype dtype, std::vector<uint64_t> shape) {
  const uint64_t n = tensor_nbytes(dtype, shape, Where{"", name, "shape"});
  total_ += n;
  tensors_.push_back({std::move(name), dtype, std::move(shape), n, 0, 0});
  return tensors_.size() - 1;
}

void ShardedSafetensorsSink::open(const std::string& dir) {
  dir_ = dir;
  const int shards = shards_ > 0 ? shards_ : static_cast<int>(std::max<uint64_t>(2, (total_ + kMaxShardBytes - 1) / kMaxShardBytes));
  files_.clear();
  files_.resize(static_cast<size_t>(shards));
  file_names_.clear();
  if (shards == 1) {
    file_names_.push_back("model.safetensors");
    for (auto& t : tensors_) t.index = files_[0].declare(t.name, t.dtype, t.shape);
  } else {
    uint64_t written = 0;
    size_t next = 0;
    for (int s = 1; s <= shards; ++s) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s, shards);
      file_names_.push_back(name);
      // Fill shards by bytes, in declaration order.
      const uint64_t target = total_ * static_cast<uint64_t>(s) / static_cast<uint64_t>(shards);
      while (next < tensors_.size() && (written < target || s == shards)) {
        Tensor& t = tensors_[next++];
        t.shard = static_cast<size_t>(s - 1);
        t.index = files_[t.shard].declare(t.name, t.dtype, t.shape);
        written += t.nbytes;
      }
    }
  }
  for (size_t s = 0; s < files_.size(); ++s) {
    files_[s].set_metadata("format", "pt");
    files_[s].open((fs::path(dir) / file_names_[s]).string());
  }
}

void ShardedSafetensorsSink::write(size_t tensor, uint64_t offset, std::span<const uint8_t> bytes) {
  const Tensor& t = tensors_.at(tensor);
  files_.at(t.shard).write(t.index, offset, bytes);
}

void ShardedSafetensorsSink::close(PayloadPolicy policy) {
  for (auto& f : files_) f.close(policy);
  if (files_.size() <= 1) return;
  std::map<std::string, std::string> weight_map;
  for (const Tensor& t : tensors_) weight_map[t.name] = file_names_[t.shard];
  write_safetensors_index((fs::path(dir_) / "model.safetensors.index.json").string(), weight_map, total_);
}

// ---- SafetensorsPlanBuilder --------------------------------------------------------------------

SafetensorsPlanBuilder::SafetensorsPlanBuilder(const FloatSource& source)
    : source_(source), sink_(std::make_unique<ShardedSafetensorsSink>()) {}

size_t SafetensorsPlanBuilder::declare(const std::string& logical, Dtype dtype, std::vector<uint64_t> shape) {
  return sink_->declare(stored_tensor_name(config(), logical), dtype, std::move(shape));
}

void SafetensorsPlanBuilder::add_unit(std::string label, std::string format, std::vector<size_t> tensors,
                                      std::function<Payloads()> produce) {
  uint64_t bytes = 0;
  for (size_t t : tensors) bytes += sink_->nbytes(t);
  units_.push_back({std::move(label), std::move(format), bytes, [tensors = std::move(tensors), produce = std::move(produce)] {
                      Payloads payloads = produce();
                      std::vector<OutPiece> out;
                      for (size_t i = 0; i < tensors.size(); ++i) out.push_back({tensors[i], 0, std::move(payloads.at(i))});
                      return out;
                    }});
}

void SafetensorsPlanBuilder::add_unquantized(const ParamSpec& spec, Dtype dtype) {
  const K3Config& c = config();
  const FloatSource& src = source_;
  const Dtype d = stored_as_f32(spec.name) ? Dtype::F32 : dtype;
  const auto bytes = [d](const std::vector<float>& v) { return d == Dtype::F32 ? f32_bytes(v.data(), v.size()) : bf16_bytes(v.data(), v.size()); };
  const std::string format(dtype_name(d));
  if (spec.kind == ParamKind::ExpertBank) {
    for (uint64_t e = 0; e < spec.shape[0]; ++e) {
      const int64_t ex = static_cast<int64_t>(e);
      const size_t id = declare(expert_tensor_name(spec.name, ex, "weight"), d, {spec.shape[1], spec.shape[2]});
      add_unit(unit_label(spec, ex), format, {id}, [&src, spec, ex, bytes] { return payloads(bytes(src.read(spec, ex))); });
    }
    return;
  }
  std::vector<uint64_t> shape = spec.shape;
  size_t padded = 0;  // kimi-k3 A_log: zero-padded to head_dim
  if (ends_with(spec.name, ".A_log")) {
    if (c.model_type == ModelType::kKimiK3) {
      padded = static_cast<size_t>(c.kda.head_dim);
      shape = {padded};
    } else {
      shape = {1, 1, spec.shape[0], 1};
    }
  }
  const size_t id = declare(spec.name, d, shape);
  add_unit(unit_label(spec), format, {id}, [&src, spec, padded, bytes] {
    std::vector<float> v = src.read(spec);
    if (padded > v.size()) v.resize(padded, 0.0f);
    return payloads(bytes(v));
  });
}

WritePlan SafetensorsPlanBuilder::build(Json config_doc, std::vector<std::pair<std::string, std::string>> files) {
  WritePlan plan;
  plan.sink = std::move(sink_);
  plan.units = std::move(units_);
  plan.config_doc = std::move(config_doc);
  plan.files = std::move(files);
  return plan;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw Error(Where{path, "", ""}, "cannot write file");
}

void write_config_files(const std::string& dir, const Json& config_doc) {
  fs::create_directories(dir);
  write_text_file((fs::path(dir) / "config.json").string(), config_doc.dump(2) + "\n");
  Json gen = {{"do_sample", false}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    if (config_doc.contains(key)) gen[key] = config_doc[key];
  }
  write_text_file((fs::path(dir) / "generation_config.json").string(), gen.dump(2) + "\n");
}

}  // namespace k3
