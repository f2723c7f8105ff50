#include "quant/families/tensor_binder.h"

namespace k3 {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string canonical_tensor_name(const std::string& name) {
  std::string n = starts_with(name, "language_model.") ? name.substr(15) : name;
  if (starts_with(n, "layers.")) n = "model." + n;
  return n;
}

bool is_skipped_tensor(const std::string& canonical) {
  return starts_with(canonical, "vision_tower.") || starts_with(canonical, "mm_projector.");
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<std::string> tensor_name_aliases(const std::string& logical) {
  std::vector<std::string> out{logical};
  const auto pos = logical.find(".mlp.");
  if (pos != std::string::npos) out.push_back(logical.substr(0, pos) + ".block_sparse_moe." + logical.substr(pos + 5));
  return out;
}

std::string expert_tensor_name(const std::string& bank_param, int64_t expert, const std::string& suffix) {
  // bank_param = "<prefix>experts.<w>.weight"
  const auto at = bank_param.rfind("experts.");
  const std::string prefix = bank_param.substr(0, at + 8);
  const std::string rest = bank_param.substr(at + 8);  // "<w>.weight"
  const std::string proj = rest.substr(0, rest.find('.'));
  return prefix + std::to_string(expert) + "." + proj + "." + suffix;
}

TensorBinder::TensorBinder(const SafetensorsCheckpoint& ckpt, LoadPlan& plan) : ckpt_(ckpt), plan_(plan) {
  for (const auto& shard : ckpt.shards()) {
    file_of_shard_.push_back(static_cast<uint32_t>(plan.files.size()));
    plan.files.push_back(shard.path());
  }
  slots_.reserve(ckpt.entries().size());
  for (const auto& e : ckpt.entries()) {
    by_canonical_.emplace(canonical_tensor_name(ckpt.info(e).name), static_cast<uint32_t>(slots_.size()));
    slots_.push_back({e, false});
  }
}

TensorBinder::Slot* TensorBinder::lookup(const std::string& logical) {
  for (const auto& name : tensor_name_aliases(logical)) {
    auto it = by_canonical_.find(name);
    if (it != by_canonical_.end()) return &slots_[it->second];
  }
  return nullptr;
}

const TensorInfo* TensorBinder::find(const std::string& logical) const {
  auto* slot = const_cast<TensorBinder*>(this)->lookup(logical);
  return slot ? &ckpt_.info(slot->entry) : nullptr;
}

SourceTensor TensorBinder::source(const Slot& slot) const {
  const TensorInfo& t = ckpt_.info(slot.entry);
  return SourceTensor{file_of_shard_[slot.entry.shard], t.name, std::string(dtype_name(t.dtype)), t.shape, t.offset,
                      t.nbytes};
}

std::optional<SourceTensor> TensorBinder::take_if_present(const std::string& logical) {
  Slot* slot = lookup(logical);
  if (slot == nullptr) return std::nullopt;
  slot->consumed = true;
  return source(*slot);
}

std::optional<SourceTensor> TensorBinder::take(const std::string& logical, const std::string& param) {
  auto t = take_if_present(logical);
  if (!t) problem_for_param(param, "missing tensor '" + logical + "'");
  return t;
}

void TensorBinder::problem(const SourceTensor& t, const std::string& field, const std::string& message) {
  plan_.problems.push_back({Where{plan_.files.at(t.file), t.name, field}, message});
}

void TensorBinder::problem_for_param(const std::string& param, const std::string& message) {
  const std::string where = ckpt_.index_path().empty() ? ckpt_.shards().front().path() : ckpt_.index_path();
  plan_.problems.push_back({Where{where, "", ""}, "parameter '" + param + "': " + message});
}

void TensorBinder::finish() {
  for (const auto& slot : slots_) {
    if (slot.consumed) continue;
    const std::string& name = ckpt_.info(slot.entry).name;
    if (is_skipped_tensor(canonical_tensor_name(name))) {
      plan_.skipped.push_back(name);
    } else {
      problem(source(slot), "", "tensor binds to no parameter (unknown or renamed module)");
    }
  }
}

bool check_float_dtype(TensorBinder& binder, const SourceTensor& t, const std::string& param) {
  if (t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F32" || t.dtype == "F64") return true;
  binder.problem(t, "dtype", "dtype " + t.dtype + " is not a float type, but parameter '" + param + "' is unquantized");
  return false;
}

bool check_shape(TensorBinder& binder, const SourceTensor& t, const std::vector<uint64_t>& want, const std::string& param) {
  if (t.shape == want) return true;
  binder.problem(t, "shape", "shape " + shape_string(t.shape) + " does not match parameter '" + param + "' " + shape_string(want));
  return false;
}

Binding bind_dense(TensorBinder& binder, const ParamSpec& spec) {
  Binding b{spec.name, Scheme{SchemeKind::Dense, ""}, {{"weight", {}}}, {}};
  auto& tensors = b.parts[0].tensors;
  if (spec.kind == ParamKind::ExpertBank) {
    const std::vector<uint64_t> expert_shape(spec.shape.begin() + 1, spec.shape.end());
    for (uint64_t e = 0; e < spec.shape[0]; ++e) {
      auto t = binder.take(expert_tensor_name(spec.name, static_cast<int64_t>(e), "weight"), spec.name);
      if (!t) continue;
      check_float_dtype(binder, *t, spec.name);
      check_shape(binder, *t, expert_shape, spec.name);
      tensors.push_back(*t);
    }
  } else {
    auto t = binder.take(spec.name, spec.name);
    if (t) {
      check_float_dtype(binder, *t, spec.name);
      if (ends_with(spec.name, ".A_log")) {
        // Padded storage ([head_dim] in K3, [1,1,H,1] in Kimi-Linear): narrow, never reshape.
        uint64_t n = 1;
        for (auto d : t->shape) n *= d;
        if (n < spec.shape[0]) {
          binder.problem(*t, "shape", "A_log " + shape_string(t->shape) + " has fewer than " + std::to_string(spec.shape[0]) + " heads");
        } else if (t->shape != spec.shape) {
          b.transforms.push_back(Transform::NarrowALog);
        }
      } else {
        check_shape(binder, *t, spec.shape, spec.name);
      }
      tensors.push_back(*t);
    }
  }
  if (!tensors.empty()) b.scheme.storage = tensors.front().dtype;
  return b;
}

}  // namespace k3
