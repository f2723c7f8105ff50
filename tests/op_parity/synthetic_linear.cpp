#include "synthetic_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>

#include "core/numeric.h"
#include "harness.h"
#include "io/ggml_types.h"
#include "quant/formats/fp8/fp8.h"
#include "quant/formats/ggml/ggml_quantize.h"
#include "quant/formats/modelslim/modelslim.h"
#include "quant/formats/mxfp4/mxfp4.h"
#include "quant/formats/nvfp4/nvfp4.h"

namespace k3::op_parity {
namespace {

// W8A8 static activation contract of the synthetic weight: a scale calibrated for the N(0, 1)
// activations of the linear cases (codes − zero reach ±124·s = ±5, 5σ) and a nonzero zero point, so
// the offset terms are exercised. A value beyond the range clamps; the allowance accounts for it.
constexpr float kStaticInputScale = 5.0f / 124.0f;
constexpr float kStaticInputOffset = 3.0f;

Scheme scheme(SchemeKind kind, std::string storage) {
  Scheme s;
  s.kind = kind;
  s.storage = std::move(storage);
  return s;
}

std::vector<float> weights(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = d(rng);
  return w;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> half_bytes(const std::vector<float>& w, bool bf16) {
  std::vector<uint16_t> h(w.size());
  for (size_t i = 0; i < w.size(); ++i) h[i] = bf16 ? encode_bf16(w[i]) : encode_f16(w[i]);
  return bytes_of(h);
}

// Random valid Q5_K blocks (the project has no Q5_K quantizer): any payload bits decode, the f16
// super-block scale d and min dmin are set to positive values of a weight-like size.
std::vector<uint8_t> random_q5_k(int64_t n, int64_t k, uint32_t seed) {
  const GgmlTypeInfo& info = ggml_type_info(GgmlType::Q5_K);
  std::vector<uint8_t> out(static_cast<size_t>(n * k / info.block_size) * info.type_size);
  std::mt19937 rng(seed);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng() & 0xFF);
  std::uniform_real_distribution<float> scale(2e-4f, 1e-3f);
  for (size_t b = 0; b < out.size(); b += info.type_size) {
    const uint16_t d = encode_f16(scale(rng)), dmin = encode_f16(scale(rng));
    std::memcpy(&out[b], &d, 2);
    std::memcpy(&out[b + 2], &dmin, 2);
  }
  return out;
}

// One stored tensor of the synthetic binding.
struct Part {
  std::string role, dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<Part> parts_for(const SyntheticSpec& spec) {
  const Scheme& s = spec.scheme;
  const int64_t n = spec.n, k = spec.k;
  const uint64_t un = static_cast<uint64_t>(n), uk = static_cast<uint64_t>(k);
  const std::vector<float> w = weights(n, k, static_cast<uint32_t>(n * 131 + k + static_cast<int>(s.kind)));
  const auto f32 = [](std::vector<float> v) { return bytes_of(v); };
  switch (s.kind) {
    case SchemeKind::Dense:
      if (s.storage == "F32") return {{"weight", "F32", {un, uk}, f32(w)}};
      return {{"weight", s.storage, {un, uk}, half_bytes(w, s.storage == "BF16")}};
    case SchemeKind::Fp8Tensor:
    case SchemeKind::Fp8Block: {
      const bool block = s.kind == SchemeKind::Fp8Block;
      const int64_t bn = block ? s.block_n : n, bk = block ? s.block_k : k;
      std::vector<uint8_t> q(w.size());
      std::vector<float> scale(static_cast<size_t>(((n + bn - 1) / bn) * ((k + bk - 1) / bk)));
      quantize_fp8_block(w.data(), n, k, bn, bk, q.data(), scale.data());
      const std::vector<uint64_t> scale_shape =
          block ? std::vector<uint64_t>{static_cast<uint64_t>((n + bn - 1) / bn), static_cast<uint64_t>((k + bk - 1) / bk)}
                : std::vector<uint64_t>{};
      return {{"weight", "F8_E4M3", {un, uk}, q}, {"weight_scale", "F32", scale_shape, f32(scale)}};
    }
    case SchemeKind::Nvfp4: {
      float amax = 0;
      for (float v : w) amax = std::max(amax, std::fabs(v));
      const float global = nvfp4_global_scale(amax);
      std::vector<uint8_t> packed(w.size() / 2), scales(w.size() / 16);
      quantize_nvfp4(w.data(), n, k, global, packed.data(), scales.data());
      return {{"weight", "U8", {un, uk / 2}, packed},
              {"weight_scale", "F8_E4M3", {un, uk / 16}, scales},
              {"weight_scale_2", "F32", {}, f32({global})}};
    }
    case SchemeKind::Mxfp4: {
      std::vector<uint8_t> packed(w.size() / 2), scales(w.size() / 32);
      quantize_mxfp4(w.data(), n, k, packed.data(), scales.data());
      return {{"weight", "U8", {un, uk / 2}, packed}, {"weight_scale", "U8", {un, uk / 32}, scales}};
    }
    case SchemeKind::W4A8: {
      const W4A8Weights q = quantize_w4a8(w.data(), n, k, s.group_size, s.int4_packed_along_n, false);
      std::vector<Part> out = {
          {"weight", "I8", {s.int4_packed_along_n ? un / 2 : un, uk}, bytes_of(q.weight)},
          {"weight_scale", "F32", {un, 1}, f32(q.scale)},
          {"weight_offset", "F32", {un, 1}, f32(std::vector<float>(un, 0.0f))}};
      if (s.group_size > 0) {
        const uint64_t groups = uk / s.group_size;
        out.push_back({"weight_scale_second", "F32", {un, groups}, f32(q.scale_second)});
        out.push_back({"weight_offset_second", "F32", {un, groups}, f32(std::vector<float>(un * groups, 0.0f))});
      }
      return out;
    }
    case SchemeKind::W8A8: {
      const W8A8Weights q = quantize_w8a8(w.data(), n, k, false);
      std::vector<Part> out = {{"weight", "I8", {un, uk}, bytes_of(q.weight)},
                               {"weight_scale", "F32", {un, 1}, f32(q.scale)},
                               {"weight_offset", "F32", {un, 1}, f32(std::vector<float>(un, 0.0f))}};
      if (s.static_activation) {
        std::vector<int32_t> bias(un);
        std::vector<float> deq(un);
        for (int64_t r = 0; r < n; ++r) {
          int64_t sum = 0;
          for (int64_t c = 0; c < k; ++c) sum += q.weight[r * k + c];
          bias[r] = static_cast<int32_t>(-kStaticInputOffset * sum);
          deq[r] = kStaticInputScale * q.scale[r];
        }
        out.push_back({"input_scale", "F32", {1}, f32({kStaticInputScale})});
        out.push_back({"input_offset", "F32", {1}, f32({kStaticInputOffset})});
        out.push_back({"quant_bias", "I32", {un}, bytes_of(bias)});
        out.push_back({"deq_scale", "F32", {un}, f32(deq)});
      }
      return out;
    }
    case SchemeKind::Ggml: {
      const GgmlTypeInfo* info = find_ggml_type(s.storage);
      if (info == nullptr) throw std::runtime_error("unknown GGML type " + s.storage);
      std::vector<uint8_t> blocks = ggml_has_quantize(info->type) ? quantize_tensor(info->type, w, uk)
                                                                   : random_q5_k(n, k, static_cast<uint32_t>(n + k));
      if (!ggml_has_quantize(info->type) && info->type != GgmlType::Q5_K) {
        throw std::runtime_error("no synthetic blocks for " + s.storage);
      }
      return {{"weight", s.storage, {un, uk}, blocks}};
    }
    case SchemeKind::GgmlSplitKvB: break;
  }
  throw std::runtime_error("no synthetic weight for scheme " + s.name());
}

}  // namespace

std::vector<SyntheticSpec> synthetic_specs() {
  std::vector<SyntheticSpec> out;
  const char* any = "odd N and K";
  out.push_back({scheme(SchemeKind::Dense, "BF16"), 37, 61, any});
  out.push_back({scheme(SchemeKind::Dense, "F16"), 37, 61, any});
  out.push_back({scheme(SchemeKind::Dense, "F32"), 37, 61, any});
  // The CUDA GEMMs read 16-byte aligned bf16 rows (K % 8) and FP8 only at N, K % 16.
  out.push_back({scheme(SchemeKind::Dense, "BF16"), 37, 88, "odd N, K % 8 (CUDA's bf16 rows)"});
  out.push_back({scheme(SchemeKind::Fp8Tensor, "F8_E4M3"), 37, 61, any});
  Scheme block = scheme(SchemeKind::Fp8Block, "F8_E4M3");
  block.block_n = block.block_k = 128;
  out.push_back({block, 131, 197, "odd N and K, partial 128x128 tiles in both"});
  out.push_back({block, 144, 208, "N, K % 16 (CUDA's FP8 GEMM), partial 128x128 tiles in both"});
  Scheme nv = scheme(SchemeKind::Nvfp4, "U8");
  nv.group_size = 16;
  out.push_back({nv, 37, 80, "odd N, K % 16"});
  Scheme mx = scheme(SchemeKind::Mxfp4, "U8");
  mx.group_size = 32;
  out.push_back({mx, 37, 96, "odd N, K % 32"});
  Scheme w4 = scheme(SchemeKind::W4A8, "I8");
  out.push_back({w4, 37, 80, "odd N, K % 16"});
  w4.group_size = 32;
  w4.int4_packed_along_n = true;
  out.push_back({w4, 38, 96, "packed along N: N even, K % 32"});
  Scheme w8 = scheme(SchemeKind::W8A8, "I8");
  out.push_back({w8, 37, 80, "odd N, K % 16"});
  w8.static_activation = true;
  out.push_back({w8, 37, 80, "odd N, K % 16"});
  for (const char* t : {"q4_0", "q8_0"}) out.push_back({scheme(SchemeKind::Ggml, t), 37, 96, "odd N, K % 32"});
  for (const char* t : {"q2_K", "q3_K", "q4_K", "q5_K", "q6_K"}) {
    out.push_back({scheme(SchemeKind::Ggml, t), 37, 512, "odd N, K % 256"});
  }
  return out;
}

SyntheticLinear& synthetic_linear(const SyntheticSpec& spec) {
  static std::map<std::string, std::unique_ptr<SyntheticLinear>> cache;
  const std::string key = spec.scheme.name() + "_" + std::to_string(spec.n) + "x" + std::to_string(spec.k);
  auto& slot = cache[key];
  if (slot) return *slot;
  const std::string path = ::testing::TempDir() + "/op_parity_" + safe_name(key) + ".bin";
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  Binding b;
  b.param = "synthetic.weight";
  b.scheme = spec.scheme;
  uint64_t offset = 0;
  for (Part& p : parts_for(spec)) {
    const uint64_t aligned = (offset + 63) / 64 * 64;
    const std::vector<char> pad(aligned - offset, 0);
    file.write(pad.data(), static_cast<std::streamsize>(pad.size()));
    file.write(reinterpret_cast<const char*>(p.bytes.data()), static_cast<std::streamsize>(p.bytes.size()));
    b.parts.push_back({p.role, {SourceTensor{0, p.role, p.dtype, p.shape, aligned, p.bytes.size()}}});
    offset = aligned + p.bytes.size();
  }
  file.close();
  if (!file) throw std::runtime_error("cannot write " + path);
  slot = std::make_unique<SyntheticLinear>();
  slot->plan.family = "synthetic";
  slot->plan.files = {path};
  ParamSpec param;
  param.name = b.param;
  param.shape = {static_cast<uint64_t>(spec.n), static_cast<uint64_t>(spec.k)};
  param.kind = ParamKind::Linear;
  slot->plan.params = {param};
  slot->plan.bindings = {b};
  slot->files = std::make_unique<PlanFiles>(slot->plan);
  return *slot;
}

}  // namespace k3::op_parity
