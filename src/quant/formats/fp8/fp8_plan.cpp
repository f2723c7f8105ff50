#include "quant/formats/fp8/fp8_plan.h"

#include "quant/formats/fp8/fp8.h"

namespace k3 {

Scheme fp8_tensor_scheme() { return Scheme{SchemeKind::Fp8Tensor, "F8_E4M3"}; }

std::vector<PartLayout> fp8_tensor_parts(uint64_t n, uint64_t k) {
  return {{"weight", {"F8_E4M3"}, {{n, k}}}, {"weight_scale", {"F32"}, {{}}}, {"input_scale", {"F32"}, {{}}}};
}

Scheme fp8_block_scheme(uint32_t block_n, uint32_t block_k) {
  return Scheme{SchemeKind::Fp8Block, "F8_E4M3", block_n, block_k};
}

QuantizedLayout fp8_block_layout(uint32_t block_n, uint32_t block_k, const std::string& scale_suffix) {
  return {fp8_block_scheme(block_n, block_k), "weight", scale_suffix, {"F32", "BF16", "F16"}};
}

namespace {

uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Parts "weight" and "weight_scale" per expert; a per-tensor scale is one tile of the whole matrix.
void dequant_fp8(const Binding& b, const ParamSpec& spec, PlanFiles& files, float* out) {
  const SourcePart& weight = need_part(b, "weight");
  const MatrixDims m = matrix_of(spec);
  const SourcePart& scale = need_part(b, "weight_scale");
  const bool block = b.scheme.kind == SchemeKind::Fp8Block;
  for (size_t e = 0; e < weight.tensors.size(); ++e) {
    std::vector<float> s = decode_source(scale.tensors.at(e), files);
    dequant_fp8_block(files.bytes(weight.tensors[e]).data(), s.data(), m.n, m.k, block ? b.scheme.block_n : m.n,
                      block ? b.scheme.block_k : m.k, out + e * m.n * m.k);
  }
}

}  // namespace

extern const PlanFormat plan_format_fp8_tensor{
    "FP8_TENSOR", [](const Scheme&) { return std::string("FP8_TENSOR"); }, dequant_fp8};

extern const PlanFormat plan_format_fp8_block{
    "FP8_BLOCK",
    [](const Scheme& s) { return "FP8_BLOCK" + std::to_string(s.block_n) + "x" + std::to_string(s.block_k); },
    dequant_fp8,
    [](const Scheme&, uint64_t n, uint64_t k) { return std::vector<uint64_t>{n, k}; },
    [](const Scheme& s, uint64_t n, uint64_t k) { return std::vector<uint64_t>{cdiv(n, s.block_n), cdiv(k, s.block_k)}; }};

}  // namespace k3
