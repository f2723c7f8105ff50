#include "quant/formats/nvfp4/nvfp4_plan.h"

#include "quant/formats/nvfp4/nvfp4.h"
#include "quant/plan/plan_format.h"

namespace k3 {

Scheme nvfp4_scheme() { return Scheme{SchemeKind::Nvfp4, "U8", 0, 0, static_cast<uint32_t>(kNvfp4Group)}; }

std::vector<PartLayout> nvfp4_parts(uint64_t n, uint64_t k) {
  return {{"weight", {"U8"}, {{n, k / 2}}},
          {"weight_scale", {"F8_E4M3"}, {{n, k / kNvfp4Group}}},
          {"weight_scale_2", {"F32"}, {{}}},
          {"input_scale", {"F32"}, {{}}}};
}

namespace {

// Parts "weight", "weight_scale" and "weight_scale_2" per expert.
void dequant_nvfp4_binding(const Binding& b, const ParamSpec& spec, PlanFiles& files, float* out) {
  const SourcePart& weight = need_part(b, "weight");
  const MatrixDims m = matrix_of(spec);
  const SourcePart& scale = need_part(b, "weight_scale");
  const SourcePart& global = need_part(b, "weight_scale_2");
  for (size_t e = 0; e < weight.tensors.size(); ++e) {
    const float g = decode_source(global.tensors.at(e), files).at(0);
    dequant_nvfp4(files.bytes(weight.tensors[e]).data(), files.bytes(scale.tensors.at(e)).data(), g, m.n, m.k,
                  out + e * m.n * m.k);
  }
}

}  // namespace

extern const PlanFormat plan_format_nvfp4{
    "NVFP4", [](const Scheme& s) { return "NVFP4/g" + std::to_string(s.group_size); }, dequant_nvfp4_binding,
    nullptr,
    nullptr,
    [](const Scheme& s, uint64_t, uint64_t k) {
      if (k % s.group_size == 0) return std::vector<std::string>{};
      return std::vector<std::string>{"NVFP4 needs K % " + std::to_string(s.group_size) + " == 0, K is " + std::to_string(k)};
    }};

}  // namespace k3
