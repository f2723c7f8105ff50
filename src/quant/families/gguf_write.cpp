// The GGUF family's writer (`gguf`, `gguf-expert-pack`): split GGUF shards of the Kimi tensors, each
// parameter's GGML type from the recipe (gguf_recipe.h), then for the ExpertPack family the pack cut
// from the routed banks just written (read back one expert slice at a time) and its manifest.
#include <cmath>
#include <filesystem>
#include <map>

#include "core/sha256.h"
#include "io/gguf.h"
#include "quant/families/checkpoint_writer.h"
#include "quant/families/expert_pack.h"
#include "quant/families/family_writer.h"
#include "quant/families/gguf_names.h"
#include "quant/formats/ggml/ggml_quantize.h"

namespace k3::family {
namespace fs = std::filesystem;

namespace {

using namespace gguf;

// [UNCONFIRMED] split files hold about this many payload bytes (llama.cpp's gguf-split splits by
// tensor count or size; any split works); k3 always writes at least two.
constexpr uint64_t kMaxGgufShardBytes = uint64_t{50} << 30;

Shape reversed(const Shape& s) { return Shape(s.rbegin(), s.rend()); }

// The split set model-0000i-of-0000n.gguf: tensors split by count in declaration order; every shard
// has general.architecture and the split.* keys, the first the hyper-parameters.
class GgufSplitSink final : public TensorSink {
 public:
  GgufSplitSink(const K3Config& config, std::string general_name) : config_(config), general_name_(std::move(general_name)) {}

  size_t declare(std::string name, GgmlType type, Shape ne) {
    GgufStreamWriter probe;  // the writer's own shape checks and size
    const size_t i = probe.declare(name, type, ne);
    tensors_.push_back({std::move(name), type, std::move(ne), probe.nbytes(i), 0, 0});
    total_ += tensors_.back().nbytes;
    return tensors_.size() - 1;
  }
  const std::string& name_of(size_t tensor) const { return tensors_.at(tensor).name; }

  size_t size() const override { return tensors_.size(); }
  uint64_t nbytes(size_t tensor) const override { return tensors_.at(tensor).nbytes; }
  uint64_t total_bytes() const override { return total_; }

  void open(const std::string& dir) override {
    const uint32_t count = static_cast<uint32_t>(std::max<uint64_t>(2, (total_ + kMaxGgufShardBytes - 1) / kMaxGgufShardBytes));
    const size_t per_shard = (tensors_.size() + count - 1) / count;
    const std::string arch = gguf_architecture(config_);
    files_.clear();
    paths_.clear();
    for (uint32_t s = 0; s < count; ++s) {
      GgufStreamWriter w;
      w.set("general.architecture", GgufValue{std::string(arch)});
      if (s == 0) {
        w.set("general.name", GgufValue{general_name_});
        for (const auto& [key, value] : metadata_integers(config_)) w.set(key, GgufValue{static_cast<uint32_t>(value)});
      }
      w.set("split.no", GgufValue{static_cast<uint16_t>(s)});
      w.set("split.count", GgufValue{static_cast<uint16_t>(count)});
      w.set("split.tensors.count", GgufValue{static_cast<int32_t>(tensors_.size())});
      for (size_t i = s * per_shard; i < std::min(tensors_.size(), (s + 1) * per_shard); ++i) {
        tensors_[i].shard = s;
        tensors_[i].index = w.declare(tensors_[i].name, tensors_[i].type, tensors_[i].ne);
      }
      paths_.push_back(gguf_split_path((fs::path(dir) / kShardPrefix).string(), s + 1, count));
      w.open(paths_.back());
      files_.push_back(std::move(w));
    }
  }
  void write(size_t tensor, uint64_t offset, std::span<const uint8_t> bytes) override {
    const Tensor& t = tensors_.at(tensor);
    files_.at(t.shard).write(t.index, offset, bytes);
  }
  void close(PayloadPolicy policy) override {
    for (auto& f : files_) f.close(policy);
  }

  const std::vector<std::string>& paths() const { return paths_; }
  // The manifest's view of the set (ExpertPack `source`).
  std::vector<GgufShardRecord> shard_records() const {
    std::vector<GgufShardRecord> out;
    for (uint32_t s = 0; s < paths_.size(); ++s) out.push_back({s, fs::path(paths_[s]).filename().string(), fs::file_size(paths_[s])});
    return out;
  }
  std::vector<GgufTensorRecord> tensor_records() const {
    std::vector<GgufTensorRecord> out;
    for (const Tensor& t : tensors_) out.push_back({t.name, t.shard, manifest_dtype_name(t.type)});
    return out;
  }

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    Shape ne;
    uint64_t nbytes = 0;
    uint32_t shard = 0;
    size_t index = 0;
  };
  const K3Config& config_;
  std::string general_name_;
  std::vector<Tensor> tensors_;
  uint64_t total_ = 0;
  std::vector<GgufStreamWriter> files_;
  std::vector<std::string> paths_;
};

std::vector<OutPiece> whole(size_t tensor, std::vector<uint8_t> bytes) {
  std::vector<OutPiece> out;
  out.push_back({tensor, 0, std::move(bytes)});
  return out;
}

class GgufPlanBuilder {
 public:
  GgufPlanBuilder(const FloatSource& source, bool pack, const QuantizeOptions& options)
      : src_(source),
        c_(source.config()),
        pack_(pack),
        recipe_(options.gguf_recipe),
        sink_(std::make_unique<GgufSplitSink>(c_, options.producer + " " + gguf_architecture(c_))) {}

  void add(const ParamSpec& spec) {
    const std::string name = gguf_tensor_name(c_, spec);
    if (is_res_norm(spec)) return;  // folded into *_res_score with its projection
    if (is_kv_b(spec) && pack_) return add_split_kv_b(spec);
    const FloatSource& src = src_;
    if (is_res_proj(spec)) {
      // *_res_score = norm ⊙ proj (the matching norm parameter is "<same prefix>_norm.weight").
      const ParamSpec norm = src.spec(spec.name.substr(0, spec.name.size() - std::string("_proj.weight").size()) + "_norm.weight");
      const size_t id = sink_->declare(name, GgmlType::F32, {spec.numel()});
      return add_unit(spec, "f32", sink_->nbytes(id), [&src, spec, norm, id] {
        const std::vector<float> p = src.read(spec), n = src.read(norm);
        std::vector<float> product(p.size());
        for (size_t i = 0; i < p.size(); ++i) product[i] = n[i] * p[i];
        return whole(id, quantize_tensor(GgmlType::F32, product, product.size()));
      });
    }
    if (is_a_log(spec)) {
      const size_t id = sink_->declare(name, GgmlType::F32, {spec.numel()});
      return add_unit(spec, "f32", sink_->nbytes(id), [&src, spec, id] {
        std::vector<float> v = src.read(spec);
        for (float& x : v) x = -std::exp(x);
        return whole(id, quantize_tensor(GgmlType::F32, v, v.size()));
      });
    }
    const GgmlType type = gguf_recipe_type(recipe_, spec, c_, pack_);
    // llama.cpp drops the conv weight's singleton channel dim: [P, 1, W] is stored ne = [W, P].
    const Shape ne = reversed(spec.kind == ParamKind::Conv ? squeezed(spec.shape) : spec.shape);
    const size_t id = sink_->declare(name, type, ne);
    if (spec.kind != ParamKind::ExpertBank) {
      return add_unit(spec, std::string(ggml_type_name(type)), sink_->nbytes(id), [&src, spec, id, type, ne] { return whole(id, quantize_tensor(type, src.read(spec), ne[0])); });
    }
    bank_of_.emplace(spec.name, id);
    const uint64_t per_expert = sink_->nbytes(id) / spec.shape[0];
    for (uint64_t e = 0; e < spec.shape[0]; ++e) {
      const int64_t ex = static_cast<int64_t>(e);
      units_.push_back({unit_label(spec, ex), std::string(ggml_type_name(type)), per_expert, [&src, spec, ex, id, type, ne, per_expert] {
                          std::vector<OutPiece> out;
                          out.push_back({id, static_cast<uint64_t>(ex) * per_expert, quantize_tensor(type, src.read(spec, ex), ne[0])});
                          return out;
                        }});
    }
  }

  WritePlan build(Json config_doc) {
    WritePlan plan;
    plan.config_doc = std::move(config_doc);
    if (pack_) plan.finish = pack_writer();
    plan.sink = std::move(sink_);
    plan.units = std::move(units_);
    return plan;
  }

 private:
  void add_unit(const ParamSpec& spec, const std::string& format, uint64_t bytes, std::function<std::vector<OutPiece>()> produce) {
    units_.push_back({unit_label(spec), format, bytes, std::move(produce)});
  }

  // The kv_b split (spec §5.5): k_b[h][c][d] = kv_b[h·(dn+dv) + d][c], v_b[h][j][c] = kv_b[h·(dn+dv) + dn + j][c].
  void add_split_kv_b(const ParamSpec& spec) {
    const uint64_t heads = c_.mla.num_heads, dn = c_.mla.qk_nope_head_dim, dv = c_.mla.v_head_dim, rkv = c_.mla.kv_lora_rank;
    const auto [k_name, v_name] = split_kv_b_names(spec.layer);
    const size_t k_id = sink_->declare(k_name, GgmlType::Q4_0, {dn, rkv, heads});
    const size_t v_id = sink_->declare(v_name, GgmlType::Q2_K, {rkv, dv, heads});
    const FloatSource& src = src_;
    add_unit(spec, "q4_0+q2_K", sink_->nbytes(k_id) + sink_->nbytes(v_id), [&src, spec, heads, dn, dv, rkv, k_id, v_id] {
      const std::vector<float> w = src.read(spec);
      std::vector<float> k(heads * rkv * dn), v(heads * dv * rkv);
      for (uint64_t h = 0; h < heads; ++h) {
        for (uint64_t c = 0; c < rkv; ++c) {
          for (uint64_t d = 0; d < dn; ++d) k[(h * rkv + c) * dn + d] = w[(h * (dn + dv) + d) * rkv + c];
          for (uint64_t j = 0; j < dv; ++j) v[(h * dv + j) * rkv + c] = w[(h * (dn + dv) + dn + j) * rkv + c];
        }
      }
      std::vector<OutPiece> out;
      out.push_back({k_id, 0, quantize_tensor(GgmlType::Q4_0, k, dn)});
      out.push_back({v_id, 0, quantize_tensor(GgmlType::Q2_K, v, rkv)});
      return out;
    });
  }

  // After the GGUF is closed: the pack's expert slices are read back from the banks just written.
  std::function<void(const std::string&)> pack_writer() {
    GgufSplitSink* sink = sink_.get();  // owned by the plan, alive while it runs
    std::map<std::string, size_t> bank_of = bank_of_;
    const K3Config* c = &c_;
    return [sink, bank_of, c](const std::string& dir) {
      std::vector<std::shared_ptr<File>> files;
      for (const std::string& p : sink->paths()) files.push_back(File::open(p));
      const GgufModel model = GgufModel::open(sink->paths().front());
      const uint64_t experts = static_cast<uint64_t>(c->moe->num_experts);
      std::vector<std::array<const GgufTensorInfo*, 3>> banks;  // per MoE layer: up, gate, down (physical order)
      for (int64_t layer : moe_layer_ids(*c)) {
        const std::string p = layer_prefix(layer) + "block_sparse_moe.experts.";
        std::array<const GgufTensorInfo*, 3> roles{};
        const char* const logical[3] = {"w3.weight", "w1.weight", "w2.weight"};
        for (int r = 0; r < 3; ++r) roles[r] = model.find_tensor(sink->name_of(bank_of.at(p + logical[r])));
        banks.push_back(roles);
      }
      KimiPackSource src;
      src.config = c;
      src.config_sha256 = sha256_file_hex((fs::path(dir) / "config.json").string());
      src.read_expert = [&](size_t li, int role, uint64_t e, std::span<uint8_t> dst) {
        const GgufTensorInfo& t = *banks.at(li)[static_cast<size_t>(role)];
        files.at(t.file_index)->read_at(t.file_offset + e * (t.nbytes / experts), dst.data(), dst.size(), "expert slice");
      };
      src.shards = sink->shard_records();
      src.tensors = sink->tensor_records();
      write_kimi_expert_pack(dir, kPackFileName, src);
    };
  }

  const FloatSource& src_;
  const K3Config& c_;
  bool pack_;
  GgufRecipe recipe_;
  std::unique_ptr<GgufSplitSink> sink_;
  std::vector<WriteUnit> units_;
  std::map<std::string, size_t> bank_of_;
};

}  // namespace

WritePlan write_plan_gguf(bool expert_pack, const FloatSource& source, Json config_doc, const QuantizeOptions& options) {
  const K3Config& c = source.config();
  if (expert_pack) {
    if (c.model_type != ModelType::kKimiK3 || !c.moe) {
      throw Error(Where{"", "", "--family"}, "the Kimi GGML MoE ExpertPack is a Kimi-K3 (MoE) format");
    }
    for (const auto& role : kimi_pack_roles(c)) ggml_row_size(role.type, role.cols, Where{"", "", "expert rows"});
  }
  GgufPlanBuilder builder(source, expert_pack, options);
  for (const auto& spec : source.params()) builder.add(spec);
  return builder.build(std::move(config_doc));
}

}  // namespace k3::family
