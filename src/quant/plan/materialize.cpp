#include "quant/plan/materialize.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/numeric.h"
#include "quant/plan/plan_format.h"

namespace k3 {

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
  if (!filled) plan_format(binding.scheme.kind).dequant(binding, spec, files, out.data());
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
      case Transform::SqueezeScale4D:
      case Transform::SliceExpert:
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
