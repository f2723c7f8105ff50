#include "quant/formats/modelslim/modelslim.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/numeric.h"
#include "quant/plan/plan_format.h"

namespace k3 {
namespace {

// Scales are rounded to their storage type before use, so that the stored value is the one the
// codes were computed with.
float stored_scale(float s, bool bf16) { return bf16 ? decode_bf16(encode_bf16(s)) : s; }

int8_t saturate_code(float x, int lo, int hi) {
  const float r = std::nearbyint(x);  // default rounding mode: nearest, ties to even
  return static_cast<int8_t>(std::clamp(r, static_cast<float>(lo), static_cast<float>(hi)));
}

float amax_of(const float* v, int64_t count) {
  float m = 0.0f;
  for (int64_t i = 0; i < count; ++i) m = std::max(m, std::fabs(v[i]));
  return m;
}

int8_t low_nibble(int8_t byte) { return static_cast<int8_t>(static_cast<int8_t>(static_cast<uint8_t>(byte) << 4) >> 4); }
int8_t high_nibble(int8_t byte) { return static_cast<int8_t>(byte >> 4); }

// One float part of expert e, which must hold exactly `count` values.
std::vector<float> decode_part(const Binding& b, const char* role, size_t e, uint64_t count, PlanFiles& files) {
  const SourceTensor& t = need_part(b, role).tensors.at(e);
  std::vector<float> v = decode_source(t, files);
  if (v.size() != count) {
    throw Error(Where{files.path(t), t.name, role}, "holds " + std::to_string(v.size()) + " values, expected " + std::to_string(count));
  }
  return v;
}

void require_zero(const std::vector<float>& offsets, const SourceTensor& t, PlanFiles& files, const char* role) {
  for (float v : offsets) {
    if (v != 0.0f) {
      throw Error(Where{files.path(t), t.name, role},
                  "nonzero W4A8 offset " + std::to_string(v) + " (only symmetric int4 exports are supported)");
    }
  }
}

}  // namespace

void pack_int4_along_n(const int8_t* q, int64_t n, int64_t k, int8_t* packed) {
  for (int64_t r = 0; r < n / 2; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int8_t even = q[(2 * r) * k + c], odd = q[(2 * r + 1) * k + c];
      const int8_t lo = kW4LowNibbleIsEvenRow ? even : odd, hi = kW4LowNibbleIsEvenRow ? odd : even;
      packed[r * k + c] = static_cast<int8_t>((static_cast<uint8_t>(hi) << 4) | (static_cast<uint8_t>(lo) & 0x0F));
    }
  }
}

void unpack_int4_along_n(const int8_t* packed, int64_t n, int64_t k, int8_t* q) {
  for (int64_t r = 0; r < n / 2; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int8_t lo = low_nibble(packed[r * k + c]), hi = high_nibble(packed[r * k + c]);
      q[(2 * r) * k + c] = kW4LowNibbleIsEvenRow ? lo : hi;
      q[(2 * r + 1) * k + c] = kW4LowNibbleIsEvenRow ? hi : lo;
    }
  }
}

void dequant_w4a8(const int8_t* weight, bool packed_along_n, const float* scale, const float* scale_second,
                  int64_t group_size, int64_t n, int64_t k, float* out, const Where& where) {
  std::vector<int8_t> codes;
  const int8_t* q = weight;
  if (packed_along_n) {
    codes.resize(static_cast<size_t>(n * k));
    unpack_int4_along_n(weight, n, k, codes.data());
    q = codes.data();
  }
  const int64_t groups = group_size > 0 ? k / group_size : 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int v = packed_along_n ? q[r * k + c] : q[r * k + c] - kW4OldLayoutCodeOffset;
      if (v < kInt4Min || v > kInt4Max) {
        throw Error(where, "int4 code " + std::to_string(v) + " at [" + std::to_string(r) + ", " + std::to_string(c) +
                               "] is outside [-8, 7] (old W4A8 layout stores one signed int4 per int8)");
      }
      const float w = static_cast<float>(v) * scale[r];
      out[r * k + c] = group_size > 0 ? w * scale_second[r * groups + c / group_size] : w;
    }
  }
}

void dequant_w8a8(const int8_t* weight, const float* scale, const float* offset, int64_t n, int64_t k, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) out[r * k + c] = (static_cast<float>(weight[r * k + c]) - offset[r]) * scale[r];
  }
}

W4A8Weights quantize_w4a8(const float* w, int64_t n, int64_t k, int64_t group_size, bool packed_along_n,
                          bool bf16_scales) {
  W4A8Weights out;
  std::vector<int8_t> codes(static_cast<size_t>(n * k));
  out.scale.resize(static_cast<size_t>(n));
  const int64_t groups = group_size > 0 ? k / group_size : 0;
  out.scale_second.resize(static_cast<size_t>(n * groups));
  for (int64_t r = 0; r < n; ++r) {
    const float* row = w + r * k;
    const float amax = amax_of(row, k);
    if (group_size == 0) {
      const float s = stored_scale(amax > 0.0f ? amax / 7.0f : 1.0f, bf16_scales);
      out.scale[r] = s;
      for (int64_t c = 0; c < k; ++c) codes[r * k + c] = saturate_code(row[c] / s, kInt4Min, kInt4Max);
      continue;
    }
    const float s1 = stored_scale(amax > 0.0f ? amax / 127.0f : 1.0f, bf16_scales);
    out.scale[r] = s1;
    for (int64_t g = 0; g < groups; ++g) {
      const float gmax = amax_of(row + g * group_size, group_size);
      const float s2 = stored_scale(gmax > 0.0f ? gmax / (7.0f * s1) : 1.0f, bf16_scales);
      out.scale_second[r * groups + g] = s2;
      for (int64_t c = g * group_size; c < (g + 1) * group_size; ++c) {
        codes[r * k + c] = saturate_code(row[c] / (s1 * s2), kInt4Min, kInt4Max);
      }
    }
  }
  out.scale_bias.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < k; ++c) {
      const float w1 = static_cast<float>(codes[r * k + c]) * out.scale[r];
      sum += group_size > 0 ? w1 * out.scale_second[r * groups + c / group_size] : w1;
    }
    out.scale_bias[r] = static_cast<float>(8.0 * sum);
  }
  if (packed_along_n) {
    out.weight.resize(static_cast<size_t>(n / 2 * k));
    pack_int4_along_n(codes.data(), n, k, out.weight.data());
  } else {
    for (int8_t& c : codes) c = static_cast<int8_t>(c + kW4OldLayoutCodeOffset);
    out.weight = std::move(codes);
  }
  return out;
}

W8A8Weights quantize_w8a8(const float* w, int64_t n, int64_t k, bool bf16_scales) {
  W8A8Weights out;
  out.weight.resize(static_cast<size_t>(n * k));
  out.scale.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const float amax = amax_of(w + r * k, k);
    const float s = stored_scale(amax > 0.0f ? amax / 127.0f : 1.0f, bf16_scales);
    out.scale[r] = s;
    for (int64_t c = 0; c < k; ++c) out.weight[r * k + c] = saturate_code(w[r * k + c] / s, -128, 127);
  }
  return out;
}

ModelSlimWeight read_modelslim_weight(const Binding& b, int64_t n, int64_t k, size_t e, PlanFiles& files) {
  ModelSlimWeight w;
  const Scheme& scheme = b.scheme;
  if (scheme.kind != SchemeKind::W4A8 && scheme.kind != SchemeKind::W8A8) {
    throw Error(Where{"", b.param, "scheme"}, "scheme " + scheme.name() + " is not a ModelSlim W4A8 / W8A8 scheme");
  }
  w.int4 = scheme.kind == SchemeKind::W4A8;
  w.packed_along_n = w.int4 && scheme.int4_packed_along_n;
  w.group_size = w.int4 ? scheme.group_size : 0;
  const uint64_t rows = static_cast<uint64_t>(n), cols = static_cast<uint64_t>(k);
  const SourcePart& weight = need_part(b, "weight");
  if (e >= weight.tensors.size()) {
    throw Error(Where{"", b.param, "weight"}, "source " + std::to_string(e) + " of " + std::to_string(weight.tensors.size()) + " requested");
  }
  const SourceTensor& wt = weight.tensors[e];
  w.where = Where{files.path(wt), wt.name, "weight"};
  if (w.packed_along_n && n % 2 != 0) throw Error(w.where, "N = " + std::to_string(n) + " is odd; the packed int4 layout needs an even row count");
  w.weight = files.bytes(wt);
  const uint64_t want = (w.packed_along_n ? rows / 2 : rows) * cols;
  if (w.weight.size() != want) {
    throw Error(w.where, "holds " + std::to_string(w.weight.size()) + " bytes, expected " + std::to_string(want));
  }
  w.scale = decode_part(b, "weight_scale", e, rows, files);
  w.offset = decode_part(b, "weight_offset", e, rows, files);
  if (!w.int4) return w;
  require_zero(w.offset, need_part(b, "weight_offset").tensors.at(e), files, "weight_offset");
  if (w.group_size > 0) {
    const int64_t gs = w.group_size;
    if (k % gs != 0) throw Error(w.where, "K = " + std::to_string(k) + " is not a multiple of group_size " + std::to_string(gs));
    w.scale_second = decode_part(b, "weight_scale_second", e, rows * (cols / gs), files);
    require_zero(decode_part(b, "weight_offset_second", e, rows * (cols / gs), files),
                 need_part(b, "weight_offset_second").tensors.at(e), files, "weight_offset_second");
  }
  return w;
}

W8A8StaticParts read_w8a8_static_parts(const Binding& b, int64_t n, size_t e, PlanFiles& files) {
  W8A8StaticParts p;
  const uint64_t rows = static_cast<uint64_t>(n);
  p.input_scale = decode_part(b, "input_scale", e, 1, files)[0];
  p.input_offset = decode_part(b, "input_offset", e, 1, files)[0];
  const SourceTensor& qb = need_part(b, "quant_bias").tensors.at(e);
  const auto qb_bytes = files.bytes(qb);
  if (qb.dtype != "I32" || qb_bytes.size() != rows * 4) {
    throw Error(Where{files.path(qb), qb.name, "quant_bias"}, "expected I32 [" + std::to_string(n) + "], found " + qb.dtype + " of " +
                                                                  std::to_string(qb_bytes.size()) + " bytes");
  }
  p.quant_bias.resize(rows);
  std::memcpy(p.quant_bias.data(), qb_bytes.data(), rows * 4);
  const SourceTensor& ds = need_part(b, "deq_scale").tensors.at(e);
  if (ds.dtype == "I64") {
    const auto bytes = files.bytes(ds);
    if (bytes.size() != rows * 8) throw Error(Where{files.path(ds), ds.name, "deq_scale"}, "expected I64 [" + std::to_string(n) + "]");
    p.deq_scale.resize(rows);
    for (uint64_t r = 0; r < rows; ++r) std::memcpy(&p.deq_scale[r], bytes.data() + 8 * r, 4);  // low 32 bits (little-endian)
  } else {
    p.deq_scale = decode_part(b, "deq_scale", e, rows, files);
  }
  return p;
}

void dequant_modelslim_binding(const Binding& b, const ParamSpec& spec, PlanFiles& files, float* out) {
  const auto [n, k] = matrix_of(spec);
  for (size_t e = 0; e < need_part(b, "weight").tensors.size(); ++e) {
    const ModelSlimWeight w = read_modelslim_weight(b, n, k, e, files);
    const auto* q = reinterpret_cast<const int8_t*>(w.weight.data());
    float* dst = out + e * static_cast<uint64_t>(n * k);
    if (!w.int4) {
      dequant_w8a8(q, w.scale.data(), w.offset.data(), n, k, dst);
      continue;
    }
    dequant_w4a8(q, w.packed_along_n, w.scale.data(), w.scale_second.data(), w.group_size, n, k, dst, w.where);
  }
}

}  // namespace k3
