#include "backend/cuda/executor/expert_packing.h"

namespace k3::cuda {
namespace {

// The layout bank parameter i stays packed in under `f`, or nullopt.
std::optional<int64_t> layout_of(const CudaFormat& f, const LoadPlan& plan, PlanFiles& files, size_t i) {
  const ParamSpec& s = plan.params[i];
  const Binding& b = plan.bindings[i];
  const int64_t experts = static_cast<int64_t>(s.shape[0]);
  const SourcePart* w = b.part("weight");
  if (!b.layout_only() || w == nullptr || static_cast<int64_t>(w->tensors.size()) != experts) return std::nullopt;
  return f.expert_layout(b, experts, static_cast<int64_t>(s.shape[1]), static_cast<int64_t>(s.shape[2]), files);
}

}  // namespace

ExpertPacking choose_expert_packing(const LoadPlan& plan, PlanFiles& files, size_t first, std::optional<size_t> second,
                                    bool packed_int_experts) {
  ExpertPacking p;
  const SchemeKind scheme = plan.bindings[first].scheme.kind;
  if (second && plan.bindings[*second].scheme.kind != scheme) return p;
  const CudaFormat& f = cuda_format(scheme);
  if (f.expert_layout == nullptr || f.upload_experts == nullptr || (f.needs_packed_int && !packed_int_experts)) return p;
  const std::optional<int64_t> layout = layout_of(f, plan, files, first);
  if (!layout || (second && layout_of(f, plan, files, *second) != layout)) return p;
  p.format = &f;
  p.scheme = scheme;
  p.layout = *layout;
  return p;
}

}  // namespace k3::cuda
