#include "quant/plan/load_plan.h"

#include <algorithm>

namespace k3 {

const char* transform_name(Transform t) {
  switch (t) {
    case Transform::NarrowALog: return "narrow-A_log";
    case Transform::ALogFromNegExp: return "A_log=log(-ssm_a)";
    case Transform::ProjFromResScore: return "proj=res_score";
    case Transform::OnesFromResScore: return "norm=1";
    case Transform::SqueezeScale4D: return "squeeze-4D-scale";
    case Transform::DequantToBf16: return "dequant-to-BF16";
    case Transform::SliceExpert: return "slice-expert";
  }
  return "?";
}

const SourcePart* Binding::part(const std::string& role) const {
  for (const auto& p : parts) {
    if (p.role == role) return &p;
  }
  return nullptr;
}

const SourceTensor& Binding::source(const char* role, int64_t expert) const {
  const SourcePart* p = part(role);
  if (p == nullptr || p->tensors.empty()) throw Error(Where{"", param, role}, "binding has no '" + std::string(role) + "' source");
  if (p->tensors.size() == 1) return p->tensors.front();
  return p->tensors.at(static_cast<size_t>(expert < 0 ? 0 : expert));
}

bool Binding::layout_only() const {
  return std::all_of(transforms.begin(), transforms.end(), [](Transform t) {
    return t == Transform::SqueezeScale4D || t == Transform::SliceExpert;
  });
}

uint64_t Binding::stored_bytes() const {
  uint64_t total = 0;
  for (const auto& p : parts) {
    for (const auto& t : p.tensors) total += t.nbytes;
  }
  return total;
}

int64_t LoadPlan::index_of(const std::string& param) const {
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == param) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace k3
