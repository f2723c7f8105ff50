#include "quant/plan/materialize.h"

#include <cmath>
#include <string>

#include "core/numeric.h"
#include "io/safetensors.h"
#include "quant/formats/dense/dense_decode.h"
#include "quant/formats/fp8/fp8.h"
#include "quant/formats/ggml/ggml_dequant.h"
#include "io/ggml_types.h"
#include "quant/formats/mxfp4/mxfp4.h"
#include "quant/formats/nvfp4/nvfp4.h"
#include "quant/formats/modelslim/modelslim.h"

namespace k3 {
namespace {

Where where_of(const SourceTensor& t, PlanFiles& files, const char* field = "") {
  return Where{files.path(t), t.name, field};
}

const SourcePart& need_part(const Binding& b, const char* role) {
  const SourcePart* p = b.part(role);
  if (p == nullptr || p->tensors.empty()) throw Error(Where{"", b.param, role}, "binding has no '" + std::string(role) + "' source");
  return *p;
}

// Rows and columns of one (per-expert) 2-D weight slice of the parameter.
struct Matrix {
  int64_t n, k;
};
Matrix matrix_of(const ParamSpec& spec) {
  const auto& s = spec.shape;
  if (s.size() < 2) throw Error(Where{"", spec.name, "shape"}, "quantized parameter must be at least 2-D");
  return {static_cast<int64_t>(s[s.size() - 2]), static_cast<int64_t>(s[s.size() - 1])};
}

// One GGML-typed source tensor dequantized whole.
std::vector<float> dequant_ggml_source(const SourceTensor& t, PlanFiles& files) {
  const GgmlTypeInfo* info = find_ggml_type(t.dtype);
  if (info == nullptr) throw Error(where_of(t, files, "dtype"), "unknown GGML type '" + t.dtype + "'");
  std::vector<float> out(numel(t.shape));
  dequantize_tensor(info->type, files.bytes(t), out.data(), static_cast<int64_t>(out.size()));
  return out;
}

// Split GGUF MLA K/V (quant-formats §5.5): rebuilds kv_b [n_h·(d_nope+d_v), r_kv] from
// k_b [n_h, r_kv, d_nope] (stored transposed per head) and v_b [n_h, d_v, r_kv]:
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

// Decodes the main tensor of every expert (or the single tensor) of a scheme into out.
void dequant_scheme(const Binding& b, const ParamSpec& spec, PlanFiles& files, float* out) {
  if (b.scheme.kind == SchemeKind::GgmlSplitKvB) return dequant_split_kv_b(b, spec, files, out);
  const SourcePart& weight = need_part(b, "weight");
  switch (b.scheme.kind) {
    case SchemeKind::Dense: {
      uint64_t pos = 0;
      for (const auto& t : weight.tensors) {
        std::vector<float> v = decode_source(t, files);
        std::copy(v.begin(), v.end(), out + pos);
        pos += v.size();
      }
      return;
    }
    case SchemeKind::Fp8Tensor:
    case SchemeKind::Fp8Block: {
      const Matrix m = matrix_of(spec);
      const SourcePart& scale = need_part(b, "weight_scale");
      const bool block = b.scheme.kind == SchemeKind::Fp8Block;
      for (size_t e = 0; e < weight.tensors.size(); ++e) {
        std::vector<float> s = decode_source(scale.tensors.at(e), files);
        dequant_fp8_block(files.bytes(weight.tensors[e]).data(), s.data(), m.n, m.k, block ? b.scheme.block_n : m.n,
                          block ? b.scheme.block_k : m.k, out + e * m.n * m.k);
      }
      return;
    }
    case SchemeKind::Nvfp4: {
      const Matrix m = matrix_of(spec);
      const SourcePart& scale = need_part(b, "weight_scale");
      const SourcePart& global = need_part(b, "weight_scale_2");
      for (size_t e = 0; e < weight.tensors.size(); ++e) {
        const float g = decode_source(global.tensors.at(e), files).at(0);
        dequant_nvfp4(files.bytes(weight.tensors[e]).data(), files.bytes(scale.tensors.at(e)).data(), g, m.n, m.k,
                      out + e * m.n * m.k);
      }
      return;
    }
    case SchemeKind::Mxfp4: {
      const Matrix m = matrix_of(spec);
      const SourcePart& scale = need_part(b, "weight_scale");
      for (size_t e = 0; e < weight.tensors.size(); ++e) {
        dequant_mxfp4(files.bytes(weight.tensors[e]).data(), files.bytes(scale.tensors.at(e)).data(), m.n, m.k,
                      out + e * m.n * m.k);
      }
      return;
    }
    case SchemeKind::W4A8:
    case SchemeKind::W8A8:
      dequant_modelslim_binding(b, spec, files, out);
      return;
    case SchemeKind::Ggml: {
      const GgmlTypeInfo* info = find_ggml_type(b.scheme.storage);
      if (info == nullptr) throw Error(Where{"", b.param, "scheme"}, "unknown GGML type '" + b.scheme.storage + "'");
      const GgmlType type = info->type;
      uint64_t pos = 0;
      const uint64_t per_tensor = numel(spec.shape) / weight.tensors.size();
      for (const auto& t : weight.tensors) {
        dequantize_tensor(type, files.bytes(t), out + pos, static_cast<int64_t>(per_tensor));
        pos += per_tensor;
      }
      return;
    }
    case SchemeKind::GgmlSplitKvB:
      return;  // handled above (no "weight" part)
  }
}

}  // namespace


std::vector<float> materialize(const Binding& binding, const ParamSpec& spec, PlanFiles& files) {
  // Sources may hold more values than the parameter (a padded A_log): decode them all first.
  uint64_t stored = 0;
  if (const SourcePart* w = binding.part("weight")) {
    for (const auto& t : w->tensors) stored += binding.scheme.kind == SchemeKind::Dense ? numel(t.shape) : 0;
  }
  std::vector<float> out(std::max<uint64_t>(stored, spec.numel()));
  bool filled = false;
  for (Transform t : binding.transforms) {
    if (t == Transform::OnesFromResScore) {
      std::fill(out.begin(), out.end(), 1.0f);
      filled = true;
    }
  }
  if (!filled) dequant_scheme(binding, spec, files, out.data());
  for (Transform t : binding.transforms) {
    switch (t) {
      case Transform::NarrowALog:
        out.resize(spec.numel());
        break;
      case Transform::ALogFromNegExp:
        out.resize(spec.numel());
        for (float& v : out) {
          if (!(v < 0.0f) || !std::isfinite(v)) {
            throw Error(Where{"", binding.param, "ssm_a"}, "ssm_a must hold -exp(A_log) (finite, < 0), got " + std::to_string(v));
          }
          v = std::log(-v);
        }
        break;
      case Transform::DequantToBf16:
        for (float& v : out) v = decode_bf16(encode_bf16(v));
        break;
      case Transform::ProjFromResScore:
      case Transform::OnesFromResScore:
      case Transform::SqueezeFp8Scale4D:
      case Transform::SliceGgufExpert:
        break;  // layout only: the scheme reference already reads these sources correctly
    }
  }
  out.resize(spec.numel());
  return out;
}

float scalar_source(const Binding& b, const char* role, int64_t expert, PlanFiles& files) {
  const std::vector<float> v = decode_source(b.source(role, expert), files);
  if (v.size() != 1) throw Error(Where{"", b.param, role}, "expected one value, found " + std::to_string(v.size()));
  return v[0];
}

std::vector<float> materialize_expert(const Binding& binding, const ParamSpec& spec, PlanFiles& files, int64_t expert) {
  if (spec.shape.size() != 3 || expert < 0 || static_cast<uint64_t>(expert) >= spec.shape[0]) {
    throw Error(Where{"", spec.name, "shape"}, "expert " + std::to_string(expert) + " of a parameter that is not an expert bank of that size");
  }
  // Keep that expert's source of every per-expert part; shared parts (one tensor) stay.
  Binding one = binding;
  for (auto& part : one.parts) {
    if (part.tensors.size() == spec.shape[0]) part.tensors = {part.tensors[static_cast<size_t>(expert)]};
  }
  ParamSpec one_spec = spec;
  one_spec.shape = {1, spec.shape[1], spec.shape[2]};
  return materialize(one, one_spec, files);
}

}  // namespace k3
