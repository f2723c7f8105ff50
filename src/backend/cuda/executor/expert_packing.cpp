#include "backend/cuda/executor/expert_packing.h"

#include "quant/formats/ggml/cuda/moe_ggml.h"
#include "quant/formats/modelslim/modelslim.h"

namespace k3::cuda {
namespace {

struct Bank {
  const Binding& b;
  int64_t experts, n, k;
};

Bank bank_of(const LoadPlan& plan, size_t i) {
  const ParamSpec& s = plan.params[i];
  return {plan.bindings[i], static_cast<int64_t>(s.shape[0]), static_cast<int64_t>(s.shape[1]),
          static_cast<int64_t>(s.shape[2])};
}

bool one_source_per_expert(const Bank& x) {
  const SourcePart* w = x.b.part("weight");
  return x.b.layout_only() && w != nullptr && static_cast<int64_t>(w->tensors.size()) == x.experts;
}

std::optional<W4Format> w4_format(const Bank& x) {
  if (!one_source_per_expert(x) || x.n % 16 != 0 || x.k % 64 != 0) return std::nullopt;
  if (x.b.scheme.kind == SchemeKind::Nvfp4) return W4Format::kNvfp4;
  if (x.b.scheme.kind == SchemeKind::Mxfp4) return W4Format::kMxfp4;
  return std::nullopt;
}

std::optional<int64_t> w4a8_group(const Bank& x, PlanFiles& files) {
  if (x.b.scheme.kind != SchemeKind::W4A8 || !one_source_per_expert(x) || x.n % 16 != 0 || x.k % 64 != 0) {
    return std::nullopt;
  }
  const ModelSlimWeight w = read_modelslim_weight(x.b, x.n, x.k, 0, files);
  const int64_t g = w.group_size;
  if (!w.int4 || (g != 0 && (g % 64 != 0 || x.k % g != 0))) return std::nullopt;
  return g;
}

std::optional<GgmlType> ggml_type(const Bank& x) {
  if (x.b.scheme.kind != SchemeKind::Ggml || !one_source_per_expert(x)) return std::nullopt;
  const GgmlTypeInfo* info = find_ggml_type(x.b.scheme.storage);
  if (info == nullptr || !moe_ggml_supported(info->type) || x.k % info->block_size != 0) return std::nullopt;
  return info->type;
}

// f of the first bank when the second (if any) gives the same.
template <typename F>
auto both(const LoadPlan& plan, size_t first, std::optional<size_t> second, F f) {
  const auto a = f(bank_of(plan, first));
  if (a && second && f(bank_of(plan, *second)) != a) return decltype(a){};
  return a;
}

}  // namespace

ExpertPacking choose_expert_packing(const LoadPlan& plan, PlanFiles& files, size_t first, std::optional<size_t> second,
                                    bool packed_int_experts) {
  ExpertPacking p;
  if (const auto f = both(plan, first, second, w4_format)) {
    p.kind = ExpertPacking::Kind::kW4;
    p.w4 = *f;
  } else if (!packed_int_experts) {
    return p;
  } else if (const auto g = both(plan, first, second, [&](const Bank& x) { return w4a8_group(x, files); })) {
    p.kind = ExpertPacking::Kind::kW4A8;
    p.w4a8_group = *g;
  } else if (const auto t = both(plan, first, second, ggml_type)) {
    p.kind = ExpertPacking::Kind::kGgml;
    p.ggml = *t;
  }
  return p;
}

}  // namespace k3::cuda
