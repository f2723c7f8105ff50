#include "quant/formats/mxfp4/mxfp4_plan.h"

#include "quant/formats/mxfp4/mxfp4.h"

namespace k3 {

QuantizedLayout mxfp4_layout() {
  Scheme s{SchemeKind::Mxfp4, "U8"};
  s.group_size = static_cast<uint32_t>(kMxfp4Group);
  return {s, "weight_packed", "weight_scale", {"U8", "F8_E8M0"}};
}

namespace {

// Parts "weight" and "weight_scale" per expert.
void dequant_mxfp4_binding(const Binding& b, const ParamSpec& spec, PlanFiles& files, float* out) {
  const SourcePart& weight = need_part(b, "weight");
  const MatrixDims m = matrix_of(spec);
  const SourcePart& scale = need_part(b, "weight_scale");
  for (size_t e = 0; e < weight.tensors.size(); ++e) {
    dequant_mxfp4(files.bytes(weight.tensors[e]).data(), files.bytes(scale.tensors.at(e)).data(), m.n, m.k,
                  out + e * m.n * m.k);
  }
}

}  // namespace

extern const PlanFormat plan_format_mxfp4{
    "MXFP4",
    [](const Scheme& s) { return "MXFP4/g" + std::to_string(s.group_size); },
    dequant_mxfp4_binding,
    [](const Scheme&, uint64_t n, uint64_t k) { return std::vector<uint64_t>{n, k / 2}; },
    [](const Scheme& s, uint64_t n, uint64_t k) { return std::vector<uint64_t>{n, k / s.group_size}; },
    [](const Scheme& s, uint64_t, uint64_t k) {
      if (k % s.group_size == 0) return std::vector<std::string>{};
      return std::vector<std::string>{"MXFP4 needs the input dimension K = " + std::to_string(k) + " to be a multiple of " +
                                      std::to_string(s.group_size)};
    }};

}  // namespace k3
