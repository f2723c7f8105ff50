#include "quant/formats/modelslim/modelslim_plan.h"

#include "quant/formats/modelslim/modelslim.h"
#include "quant/plan/plan_format.h"

namespace k3 {

Scheme w4a8_scheme(uint32_t group_size, bool packed_along_n) {
  Scheme s{SchemeKind::W4A8, "I8"};
  s.group_size = group_size;
  s.int4_packed_along_n = packed_along_n;
  return s;
}

Scheme w8a8_scheme(bool static_activation) {
  Scheme s{SchemeKind::W8A8, "I8"};
  s.static_activation = static_activation;
  return s;
}

std::vector<PartLayout> modelslim_parts(const Scheme& s, uint64_t n, uint64_t k) {
  const std::vector<std::vector<uint64_t>> per_channel{{n, 1}};
  std::vector<PartLayout> rules;
  const bool packed = s.kind == SchemeKind::W4A8 && s.int4_packed_along_n;
  rules.push_back({"weight", {"I8"}, {{packed ? n / 2 : n, k}}});
  rules.push_back({"weight_scale", {}, per_channel});
  rules.push_back({"weight_offset", {}, per_channel});
  if (s.kind == SchemeKind::W4A8 && s.group_size > 0) {
    const std::vector<std::vector<uint64_t>> per_group{{n, k / s.group_size}};
    rules.push_back({"weight_scale_second", {}, per_group});
    rules.push_back({"weight_offset_second", {}, per_group});
  }
  if (packed) rules.push_back({"scale_bias", {"F32"}, {{n, 1}, {n, 16}}, false});  // kernel epilogue term, unused by dequant
  if (s.kind == SchemeKind::W8A8 && s.static_activation) {
    rules.push_back({"input_scale", {}, {{1}}});
    rules.push_back({"input_offset", {}, {{1}}});
    rules.push_back({"quant_bias", {"I32"}, {{n}}});
    rules.push_back({"deq_scale", {"F32", "I64"}, {{n}}});
  }
  return rules;
}

extern const PlanFormat plan_format_w4a8{
    "W4A8",
    [](const Scheme& s) {
      return std::string("W4A8") + (s.group_size ? "/g" + std::to_string(s.group_size) : "/channel") +
             (s.int4_packed_along_n ? "/packed" : "/unpacked");
    },
    dequant_modelslim_binding,
    nullptr,
    nullptr,
    [](const Scheme& s, uint64_t n, uint64_t k) {
      std::vector<std::string> problems;
      if (s.int4_packed_along_n && n % 2 != 0) {
        problems.push_back("N = " + std::to_string(n) + " is odd; the packed int4 layout needs an even row count");
      }
      if (s.group_size > 0 && k % s.group_size != 0) {
        problems.push_back("K = " + std::to_string(k) + " is not a multiple of group_size " + std::to_string(s.group_size));
      }
      return problems;
    }};

extern const PlanFormat plan_format_w8a8{
    "W8A8", [](const Scheme& s) { return std::string(s.static_activation ? "W8A8_STATIC" : "W8A8_DYNAMIC"); },
    dequant_modelslim_binding};

}  // namespace k3
