#include "quant/formats/ggml/ggml_plan.h"

#include "quant/formats/ggml/ggml_dequant.h"
#include "quant/plan/plan_format.h"

namespace k3 {

Scheme ggml_scheme(GgmlType type) { return Scheme{SchemeKind::Ggml, std::string(ggml_type_name(type))}; }

Scheme ggml_split_kv_b_scheme() { return Scheme{SchemeKind::GgmlSplitKvB, "q4_0+q2_K"}; }

namespace {

// Every weight source dequantized whole, one after the other (equal shares of the parameter).
void dequant_ggml_binding(const Binding& b, const ParamSpec& spec, PlanFiles& files, float* out) {
  const SourcePart& weight = need_part(b, "weight");
  const GgmlTypeInfo* info = find_ggml_type(b.scheme.storage);
  if (info == nullptr) throw Error(Where{"", b.param, "scheme"}, "unknown GGML type '" + b.scheme.storage + "'");
  const GgmlType type = info->type;
  uint64_t pos = 0;
  const uint64_t per_tensor = numel(spec.shape) / weight.tensors.size();
  for (const auto& t : weight.tensors) {
    dequantize_tensor(type, files.bytes(t), out + pos, static_cast<int64_t>(per_tensor));
    pos += per_tensor;
  }
}

// One GGML-typed source tensor dequantized whole.
std::vector<float> dequant_ggml_source(const SourceTensor& t, PlanFiles& files) {
  const GgmlTypeInfo* info = find_ggml_type(t.dtype);
  if (info == nullptr) throw Error(Where{files.path(t), t.name, "dtype"}, "unknown GGML type '" + t.dtype + "'");
  std::vector<float> out(numel(t.shape));
  dequantize_tensor(info->type, files.bytes(t), out.data(), static_cast<int64_t>(out.size()));
  return out;
}

// Rebuilds kv_b from k_b (stored transposed per head) and v_b:
// kv_b[h·(d_nope+d_v) + d][c] = k_b[h][c][d], kv_b[h·(d_nope+d_v) + d_nope + j][c] = v_b[h][j][c].
void dequant_split_kv_b(const Binding& b, const ParamSpec& spec, PlanFiles& files, float* out) {
  const SourceTensor& k = need_part(b, "k_b").tensors.front();
  const SourceTensor& v = need_part(b, "v_b").tensors.front();
  if (k.shape.size() != 3 || v.shape.size() != 3 || k.shape[0] != v.shape[0] || k.shape[1] != v.shape[2] ||
      spec.shape.size() != 2 || spec.shape[0] != k.shape[0] * (k.shape[2] + v.shape[1]) || spec.shape[1] != k.shape[1]) {
    throw Error(Where{"", b.param, "shape"}, "k_b/v_b shapes do not split kv_b");
  }
  const uint64_t heads = k.shape[0], rkv = k.shape[1], dn = k.shape[2], dv = v.shape[1];
  const std::vector<float> kf = dequant_ggml_source(k, files);
  const std::vector<float> vf = dequant_ggml_source(v, files);
  for (uint64_t h = 0; h < heads; ++h) {
    float* head = out + h * (dn + dv) * rkv;
    for (uint64_t c = 0; c < rkv; ++c) {
      for (uint64_t d = 0; d < dn; ++d) head[d * rkv + c] = kf[(h * rkv + c) * dn + d];
    }
    for (uint64_t j = 0; j < dv; ++j) {
      for (uint64_t c = 0; c < rkv; ++c) head[(dn + j) * rkv + c] = vf[(h * dv + j) * rkv + c];
    }
  }
}

}  // namespace

extern const PlanFormat plan_format_ggml{
    "GGUF", [](const Scheme& s) { return "GGUF:" + s.storage; }, dequant_ggml_binding};

extern const PlanFormat plan_format_ggml_split_kv_b{
    "GGUF_SPLIT_KV_B", [](const Scheme&) { return std::string("GGUF_SPLIT_KV_B(Q4_0,Q2_K)"); }, dequant_split_kv_b};

}  // namespace k3
