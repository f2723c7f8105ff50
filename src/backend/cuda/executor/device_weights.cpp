#include "backend/cuda/executor/device_weights.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include "backend/cuda/executor/bank_linear.h"
#include "backend/cuda/executor/cuda_format.h"
#include "backend/cuda/executor/expert_packing.h"
#include "backend/cuda/executor/step.h"
#include "backend/cuda/core/upload.h"
#include "core/error.h"
#include "core/numeric.h"
#include "backend/cpu/weights.h"
#include "parallel/sharding.h"

namespace k3::cuda {
namespace {

// The load plan's parameters: copied as stored where the GEMM reads them so, else dequantised. With
// a HeadShare, the parameters divided by head are this rank's share of them (device_weights.h).
class Uploader final : public WeightFiller {
 public:
  Uploader(Arena& arena, const LoadPlan& plan, PlanFiles& files, const UploadOptions& options, const HeadShare& heads)
      : arena_(arena), plan_(plan), files_(files), options_(options), heads_(heads), up_{arena, plan, files, bytes_, options.w4a4} {}

  DeviceLinear linear(const std::string& name) override {
    const size_t i = index(name);
    DeviceLinear w;
    const int64_t rows = static_cast<int64_t>(plan_.params[i].shape[0]);
    w.k = static_cast<int64_t>(plan_.params[i].shape[1]);
    const IndexRange held = head_share(i, rows).value_or(IndexRange{0, rows});
    w.n = held.count;
    const CudaFormat& f = cuda_format(plan_.bindings[i].scheme.kind);
    if (options_.dense_linears == DenseLinears::kBf16 || !packed_linear(f, i, name, held, w)) {
      w.kind = DeviceLinear::Kind::kBf16;
      w.bf16 = param_bf16(i, name, held);
    }
    w.gathered_input_unit = gathered_unit(i);
    return w;
  }

  DeviceLinear bf16_linear(const std::string& name) override {
    const size_t i = index(name);
    DeviceLinear w;
    w.kind = DeviceLinear::Kind::kBf16;
    w.n = static_cast<int64_t>(plan_.params[i].shape[0]);
    w.k = static_cast<int64_t>(plan_.params[i].shape[1]);
    w.bf16 = param_bf16(i, name, {0, w.n});
    return w;
  }

  DeviceExperts experts(const std::string& first, const std::string& second) override {
    const size_t i1 = index(first);
    const ParamSpec& s1 = plan_.params[i1];
    const int64_t E = static_cast<int64_t>(s1.shape[0]), n1 = static_cast<int64_t>(s1.shape[1]);
    const int64_t K = static_cast<int64_t>(s1.shape[2]);
    int64_t n2 = 0;
    size_t i2 = 0;
    if (!second.empty()) {
      i2 = index(second);
      const ParamSpec& s2 = plan_.params[i2];
      if (s2.shape[0] != s1.shape[0] || s2.shape[2] != s1.shape[2]) {
        throw Error(Where{"", second, "shape"}, "does not stack with " + first);
      }
      n2 = static_cast<int64_t>(s2.shape[1]);
    }
    DeviceExperts bank;
    const std::optional<size_t> second_index = n2 > 0 ? std::optional<size_t>(i2) : std::nullopt;
    const ExpertPacking packing = choose_expert_packing(plan_, files_, i1, second_index, options_.packed_int);
    if (packing.packed()) {
      bank.packed_bank = packing.format->upload_experts(up_, {first, i1, n2 > 0 ? i2 : i1, n1, n2, E, K}, packing.layout);
      return bank;
    }
    bank.bf16 = arena_.alloc_tensor(DType::kBF16, E * (n1 + n2), K, first.c_str());
    uint16_t* base = bank.bf16.as<uint16_t>();
    for (int64_t e = 0; e < E; ++e) {
      uint16_t* dst = base + e * (n1 + n2) * K;
      write_bf16(i1, e, dst);
      if (n2 > 0) write_bf16(i2, e, dst + n1 * K);
    }
    bytes_ += bank.bf16.bytes();
    return bank;
  }

  DeviceVector vector(const std::string& name, VectorRole role) override {
    std::vector<float> v = floats(name);
    keep_head_share(index(name), v, role == VectorRole::kALog);
    return upload(v, name);
  }
  DeviceVector zeros(int64_t n, const std::string& what) override {
    return upload(std::vector<float>(static_cast<size_t>(n), 0.0f), what);
  }

  DeviceVector res_score(const std::string& prefix) override {
    std::vector<float> c = floats(prefix + "_norm.weight");
    const std::vector<float> proj = floats(prefix + "_proj.weight");
    for (size_t i = 0; i < c.size(); ++i) c[i] *= proj[i];
    return upload(c, prefix + " score");
  }

  DeviceVector kda_conv(const std::string& prefix) override {
    std::vector<float> conv;
    for (const char* name : {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"}) {
      std::vector<float> one = floats(prefix + name);
      keep_head_share(index(prefix + name), one);
      conv.insert(conv.end(), one.begin(), one.end());
    }
    return upload(conv, prefix + "q|k|v conv1d");
  }

  void absorb_kv_b(const std::string& name, const MlaConfig& m, DeviceMla& w) override {
    const size_t i = index(name);
    const CudaFormat& f = cuda_format(plan_.bindings[i].scheme.kind);
    if (f.absorbed_kv_b != nullptr && mla_fast_geometry(m) && heads_.ranks == 1) {  // stays packed
      w.absorbed.packed = f.absorbed_kv_b(up_, i, name, m);
      return;
    }
    std::vector<float> kv_b = floats(name);  // m: this rank's heads
    keep_head_share(i, kv_b);
    std::vector<float> uk, uv;
    split_kv_b(kv_b, m, uk, uv);
    const int64_t nh = m.num_heads, dn = m.qk_nope_head_dim, dv = m.v_head_dim, r = m.kv_lora_rank;
    w.absorbed.w_uk = matrix_bf16(uk, nh * dn, r, name + " W_UK");
    w.absorbed.w_uv = matrix_bf16(uv, nh * dv, r, name + " W_UV");
  }

  DeviceTensor embedding(const std::string& name) override {
    const size_t i = index(name);
    return param_bf16(i, name, {0, static_cast<int64_t>(plan_.params[i].shape[0])});
  }

 private:
  // Sets w to its scheme's GEMM form of rows `held` of parameter i: the format's own, or a bank of
  // one expert (bank_linear.h); false: none (bf16).
  bool packed_linear(const CudaFormat& f, size_t i, const std::string& name, IndexRange held, DeviceLinear& w) {
    if (f.linear != nullptr) return f.linear(up_, i, name, held, w);
    if (!banks_dense_linears(f, options_.dense_linears)) return false;
    const std::optional<int64_t> layout = dense_bank_layout(plan_, files_, i, held, options_.packed_int);
    if (!layout) return false;
    upload_bank_linear(up_, i, name, held, *layout, w);
    return true;
  }

  size_t index(const std::string& name) const {
    const int64_t i = plan_.index_of(name);
    if (i < 0) throw Error(Where{"", name, ""}, "parameter is not in the load plan");
    return static_cast<size_t>(i);
  }

  // This rank's share of `count` entries of parameter i (its rows, or a vector's entries) when
  // parallel/sharding.h divides the parameter by head and a HeadShare is set; `per_head` entries per
  // head (0: count over the heads). nullopt: the whole parameter.
  std::optional<IndexRange> head_share(size_t i, int64_t count, int64_t per_head = 0) const {
    const int64_t heads = heads_dividing(i, Split::kRows);
    if (heads == 0) return std::nullopt;
    if (per_head == 0) {
      if (count % heads != 0) {
        throw Error(Where{"", plan_.params[i].name, "shape"}, std::to_string(count) + " entries do not divide among " +
                                                                  std::to_string(heads) + " heads");
      }
      per_head = count / heads;
    }
    const IndexRange mine = split_range(heads, heads_.ranks, heads_.rank);
    return IndexRange{mine.first * per_head, mine.count * per_head};
  }
  // v (parameter i, row-major) cut to this rank's head share: its rows of v.size() / rows entries
  // each; `one_per_head` (A_log, which may be stored padded past the heads): its heads' entries.
  void keep_head_share(size_t i, std::vector<float>& v, bool one_per_head = false) const {
    const int64_t rows = static_cast<int64_t>(plan_.params[i].shape[0]);
    const int64_t width = one_per_head ? 1 : static_cast<int64_t>(v.size()) / rows;
    const std::optional<IndexRange> share = one_per_head ? head_share(i, static_cast<int64_t>(v.size()), 1) : head_share(i, rows);
    if (share) v = std::vector<float>(v.begin() + share->first * width, v.begin() + share->end() * width);
  }
  // The o_proj input's group width (one head's values) when the input is all-gathered, else 0.
  int64_t gathered_unit(size_t i) const {
    const int64_t heads = heads_dividing(i, Split::kColumns);
    return heads > 0 ? static_cast<int64_t>(plan_.params[i].shape[1]) / heads : 0;
  }
  // Under a HeadShare, the model's heads of parameter i's attention kind when parallel/sharding.h
  // divides the parameter by head as `split` (kRows: its outputs, kColumns: its inputs); else 0.
  int64_t heads_dividing(size_t i, Split split) const {
    if (heads_.ranks <= 1) return 0;
    const ParamSpec& spec = plan_.params[i];
    const ShardRule rule = shard_rule(spec);
    if (rule.split != split || std::string_view(rule.axis) != "heads") return 0;
    return spec.group == ParamGroup::Kda ? heads_.kda_heads : heads_.mla_heads;
  }

  // Rows [rows.first, rows.end()) of 2-D parameter i as a bf16 matrix on the device.
  DeviceTensor param_bf16(size_t i, const std::string& name, IndexRange rows) {
    const ParamSpec& s = plan_.params[i];
    const int64_t k = static_cast<int64_t>(s.shape[1]);
    DeviceTensor t = arena_.alloc_tensor(DType::kBF16, rows.count, k, name.c_str());
    if (rows.count == static_cast<int64_t>(s.shape[0])) {
      write_bf16(i, -1, t.as<uint16_t>());
    } else {
      const std::vector<float> v = floats(name);
      std::vector<uint16_t> bits(static_cast<size_t>(rows.count * k));
      for (size_t j = 0; j < bits.size(); ++j) bits[j] = encode_bf16(v[static_cast<size_t>(rows.first * k) + j]);
      copy_bytes_to_device(t.as<uint16_t>(), bits.data(), bits.size() * 2);
    }
    bytes_ += t.bytes();
    return t;
  }

  std::vector<float> floats(const std::string& name) {
    const size_t i = index(name);
    return materialize(plan_.bindings[i], plan_.params[i], files_);
  }
  DeviceVector upload(const std::vector<float>& v, const std::string& name) { return up_.upload(v, name); }
  DeviceTensor matrix_bf16(const std::vector<float>& v, int64_t rows, int64_t cols, const std::string& name) {
    const DeviceTensor t = upload_f32(arena_, v.data(), rows, cols, DType::kBF16, name.c_str());
    bytes_ += t.bytes();
    return t;
  }

  // Parameter i (or expert e of it) as bf16 into device memory at dst: BF16 bytes copied as stored,
  // anything else dequantised through its scheme's reference and rounded to bf16 (RNE).
  void write_bf16(size_t i, int64_t e, uint16_t* dst) {
    const Binding& b = plan_.bindings[i];
    const ParamSpec& spec = plan_.params[i];
    const size_t count = e < 0 ? spec.numel() : spec.numel() / spec.shape[0];
    const SourcePart* w = b.part("weight");
    const bool per_expert_sources = e < 0 || (w != nullptr && w->tensors.size() == spec.shape[0]);
    if (b.layout_only() && b.scheme.kind == SchemeKind::Dense && b.scheme.storage == "BF16" && per_expert_sources) {
      const std::span<const uint8_t> bytes = files_.bytes(b.source("weight", e));
      if (bytes.size() != count * 2) throw Error(Where{files_.path(b.source("weight", e)), spec.name, "shape"}, "stored size differs from the parameter's");
      copy_bytes_to_device(dst, bytes.data(), bytes.size());
      return;
    }
    const std::vector<float> v = e < 0 ? materialize(b, spec, files_) : materialize_expert(b, spec, files_, e);
    std::vector<uint16_t> bits(v.size());
    for (size_t j = 0; j < v.size(); ++j) bits[j] = encode_bf16(v[j]);
    copy_bytes_to_device(dst, bits.data(), bits.size() * 2);
  }

  Arena& arena_;
  const LoadPlan& plan_;
  PlanFiles& files_;
  UploadOptions options_;
  HeadShare heads_;
  UploadContext up_;  // what the formats' entries upload with (bytes_ counts theirs too)
};

DeviceLinear linear_if(WeightFiller& f, bool present, const std::string& name) {
  return present ? f.linear(name) : DeviceLinear{};
}

DeviceKda kda_weights(WeightFiller& f, const K3Config& c, const std::string& p) {
  DeviceKda w;
  w.q = f.linear(p + "q_proj.weight");
  w.k = f.linear(p + "k_proj.weight");
  w.v = f.linear(p + "v_proj.weight");
  w.o = f.linear(p + "o_proj.weight");
  w.g = linear_if(f, c.kda.use_full_rank_gate, p + "g_proj.weight");
  w.g_a = linear_if(f, !c.kda.use_full_rank_gate, p + "g_a_proj.weight");
  w.g_b = linear_if(f, !c.kda.use_full_rank_gate, p + "g_b_proj.weight");
  w.f_a = f.linear(p + "f_a_proj.weight");
  w.f_b = f.linear(p + "f_b_proj.weight");
  w.b = f.linear(p + "b_proj.weight");
  w.conv = f.kda_conv(p);
  w.a_log = f.vector(p + "A_log", VectorRole::kALog);
  w.dt_bias = f.vector(p + "dt_bias", VectorRole::kDtBias);
  w.o_norm = f.vector(p + "o_norm.weight", VectorRole::kNormWeight);
  return w;
}

DeviceMla mla_weights(WeightFiller& f, const K3Config& c, const std::string& p) {
  const MlaConfig& m = c.mla;
  DeviceMla w;
  if (m.q_lora_rank) {
    w.q_a = f.linear(p + "q_a_proj.weight");
    w.q_a_norm = f.vector(p + "q_a_layernorm.weight", VectorRole::kNormWeight);
    w.q_b = f.linear(p + "q_b_proj.weight");
  } else {
    w.q = f.linear(p + "q_proj.weight");
  }
  w.kv_a = f.linear(p + "kv_a_proj_with_mqa.weight");
  w.kv_a_norm = f.vector(p + "kv_a_layernorm.weight", VectorRole::kNormWeight);
  w.kv_b = f.linear(p + "kv_b_proj.weight");
  f.absorb_kv_b(p + "kv_b_proj.weight", m, w);
  w.g = linear_if(f, m.use_output_gate, p + "g_proj.weight");
  w.o = f.linear(p + "o_proj.weight");
  return w;
}

DeviceMlp mlp_weights(WeightFiller& f, const std::string& p) {
  return {f.linear(p + "gate_proj.weight"), f.linear(p + "up_proj.weight"), f.linear(p + "down_proj.weight")};
}

// Bank `role` of MoE layer `layer` from the filler: kept on the device, or handed to the sink and its
// device memory given back (only its form stays). `streamed` sums the bytes handed over.
DeviceExperts expert_bank(WeightFiller& f, Arena* arena, ExpertBankSink* sink, int64_t layer, int role,
                          const std::string& first, const std::string& second, uint64_t& streamed) {
  if (sink == nullptr) return f.experts(first, second);
  const size_t mark = arena->mark();
  const DeviceExperts bank = f.experts(first, second);
  streamed += sink->keep(layer, role, bank);
  arena->reset(mark);
  DeviceExperts form;
  form.packed_bank = bank.packed_bank;  // its kind; the device memory is given back
  return form;
}

DeviceMoe moe_weights(WeightFiller& f, const K3Config& c, const std::string& p, int64_t layer, Arena* arena,
                      ExpertBankSink* sink, uint64_t& streamed) {
  const MoeConfig& m = *c.moe;
  DeviceMoe w;
  w.router = f.bf16_linear(p + "gate.weight");
  w.correction_bias = m.has_score_correction_bias
                          ? f.vector(p + "gate.e_score_correction_bias", VectorRole::kCorrectionBias)
                          : f.zeros(m.num_experts, p + "zero correction bias");
  if (m.routed_expert_hidden_size) {
    w.latent_down = f.linear(p + "routed_expert_down_proj.weight");
    w.latent_up = f.linear(p + "routed_expert_up_proj.weight");
    if (m.latent_moe_use_norm) w.latent_norm = f.vector(p + "routed_expert_norm.weight", VectorRole::kNormWeight);
  }
  w.experts.w13 = expert_bank(f, arena, sink, layer, 0, p + "experts.w1.weight", p + "experts.w3.weight", streamed);
  w.experts.w2 = expert_bank(f, arena, sink, layer, 1, p + "experts.w2.weight", "", streamed);
  if (m.num_shared_experts > 0) w.shared = mlp_weights(f, p + "shared_experts.");
  return w;
}

}  // namespace

DeviceWeights build_weights(WeightFiller& f, const K3Config& config, Arena* arena, ExpertBankSink* sink) {
  if (sink != nullptr && arena == nullptr) throw Error("build_weights: expert streaming needs the filler's arena");
  uint64_t streamed = 0;
  DeviceWeights w;
  w.embed = f.embedding("model.embed_tokens.weight");
  const bool attn_res = config.attn_res_block_size.has_value();
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const std::string p = layer_prefix(l);
    DeviceLayer& lw = w.layers.emplace_back();
    lw.input_norm = f.vector(p + "input_layernorm.weight", VectorRole::kNormWeight);
    lw.post_attention_norm = f.vector(p + "post_attention_layernorm.weight", VectorRole::kNormWeight);
    if (attn_res) {
      lw.attn_res_c = f.res_score(p + "self_attention_res");
      lw.mlp_res_c = f.res_score(p + "mlp_res");
    }
    if (config.is_kda(l)) {
      lw.kda = kda_weights(f, config, p + "self_attn.");
    } else {
      lw.mla = mla_weights(f, config, p + "self_attn.");
    }
    if (config.is_moe(l)) {
      lw.moe = moe_weights(f, config, p + "block_sparse_moe.", l, arena, sink, streamed);
    } else {
      lw.mlp = mlp_weights(f, p + "mlp.");
    }
  }
  w.final_norm = f.vector("model.norm.weight", VectorRole::kNormWeight);
  if (attn_res) w.output_res_c = f.res_score("model.output_attn_res");
  if (config.tie_word_embeddings) {
    w.lm_head.kind = DeviceLinear::Kind::kBf16;
    w.lm_head.n = w.embed.rows;
    w.lm_head.k = w.embed.cols;
    w.lm_head.bf16 = w.embed;
  } else {
    w.lm_head = f.linear("lm_head.weight");  // in its scheme's GEMM form, like every dense linear
  }
  w.backend_extras.bytes = f.bytes() - streamed;  // the device bytes that stay
  return w;
}

DeviceWeights upload_weights(Arena& arena, const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                             const UploadOptions& options, ExpertBankSink* sink, const HeadShare& heads) {
  if (!plan.ok()) {
    throw Error(plan.problems.front().where, "the load plan has " + std::to_string(plan.problems.size()) +
                                                 " problem(s), first: " + plan.problems.front().message);
  }
  Uploader u(arena, plan, files, options, heads);
  return build_weights(u, config, &arena, sink);
}

}  // namespace k3::cuda
