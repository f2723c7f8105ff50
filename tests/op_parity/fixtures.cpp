#include "fixtures.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "quant/families/family_test_util.h"

namespace k3::op_parity {
namespace {

// The master seed of every tiny checkpoint (the routing margins of the MoE cases are checked for it).
constexpr uint64_t kTinySeed = 5;

std::string key_of(const TinyId& id) { return id.label(); }

}  // namespace

std::string TinyId::label() const {
  return std::string(family_name(family)) + "/" + (arch == TinyArch::KimiK3 ? "kimi-k3" : "kimi-linear");
}

std::string TinyId::safe() const {
  return safe_name(family_name(family)) + (arch == TinyArch::KimiK3 ? "_k3" : "_linear");
}

std::vector<TinyId> all_tiny_ids() {
  std::vector<TinyId> out;
  for (FamilyId f : all_families()) {
    for (TinyArch a : {TinyArch::KimiK3, TinyArch::KimiLinear}) out.push_back({f, a});
  }
  return out;
}

Tiny& tiny(const TinyId& id) {
  static std::map<std::string, std::unique_ptr<Tiny>> cache;
  auto& slot = cache[key_of(id)];
  if (slot) return *slot;
  slot = std::make_unique<Tiny>();
  Tiny& t = *slot;
  test::TinyCheckpoint written;
  try {
    written = test::make_tiny(id.family, id.arch, kTinySeed);
  } catch (const std::exception& e) {
    t.error = e.what();  // a combination the family's format cannot express
    return t;
  }
  t.dir = written.dir;
  const CheckpointDir ckpt = open_checkpoint_dir(t.dir);
  t.config = *ckpt.config;
  t.plan = plan_checkpoint(ckpt);
  if (!t.plan.ok()) throw std::runtime_error(id.label() + ": the tiny checkpoint's plan has problems");
  t.files = std::make_unique<PlanFiles>(t.plan);
  return t;
}

const ModelWeights& bound_weights(const TinyId& id, const Target& target) {
  static std::map<std::string, std::unique_ptr<ModelWeights>> cache;
  auto& slot = cache[key_of(id) + "@" + target.name];
  if (!slot) {
    Tiny& t = tiny(id);
    ScopedTarget scope(target);
    slot = std::make_unique<ModelWeights>(bind_weights(t.config, t.plan, *t.files));
  }
  return *slot;
}

reference::WeightSource weight_source(const TinyId& id) {
  Tiny* t = &tiny(id);
  return [t](const std::string& name) {
    const int64_t i = t->plan.index_of(name);
    if (i < 0) throw std::runtime_error("no parameter " + name);
    const std::vector<float> v = materialize(t->plan.bindings[i], t->plan.params[i], *t->files);
    return std::vector<double>(v.begin(), v.end());
  };
}

reference::ActivationRule activation_rule(const TinyId& id) {
  Tiny& t = tiny(id);
  return reference::format_activation_rule(t.plan, *t.files);
}

Backend& cpu_backend() {
  static const std::unique_ptr<Backend> backend = make_cpu_backend();
  return *backend;
}

std::string format_column(const Scheme& s) {
  auto lower = [](std::string v) {
    for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return v;
  };
  switch (s.kind) {
    case SchemeKind::Dense: return lower(s.storage);
    case SchemeKind::Fp8Tensor: return "fp8-tensor";
    case SchemeKind::Fp8Block: return "fp8-block";
    case SchemeKind::Nvfp4: return "nvfp4";
    case SchemeKind::Mxfp4: return "mxfp4";
    case SchemeKind::W4A8: return "w4a8";
    case SchemeKind::W8A8: return "w8a8";
    case SchemeKind::Ggml: {
      // GGUF float tensors run the dense kernels: same column as the safetensors dtypes.
      const std::string l = lower(s.storage);
      if (l == "f32" || l == "f16" || l == "bf16") return l;
      return s.storage;
    }
    case SchemeKind::GgmlSplitKvB: return "q4_0+q2_K";
  }
  return "?";
}

std::vector<std::string> formats_under(const LoadPlan& plan, const std::vector<std::string>& prefixes) {
  std::vector<std::string> out;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const ParamSpec& p = plan.params[i];
    if (p.kind != ParamKind::Linear && p.kind != ParamKind::ExpertBank) continue;
    const bool wanted = std::any_of(prefixes.begin(), prefixes.end(),
                                    [&](const std::string& pre) { return p.name.rfind(pre, 0) == 0; });
    if (!wanted) continue;
    const std::string col = format_column(plan.bindings[i].scheme);
    if (std::find(out.begin(), out.end(), col) == out.end()) out.push_back(col);
  }
  // In the matrix's column order.
  std::vector<std::string> ordered;
  for (const std::string& c : format_columns()) {
    if (std::find(out.begin(), out.end(), c) != out.end()) ordered.push_back(c);
  }
  return ordered;
}

std::vector<float> random_values(int64_t rows, int64_t cols, uint32_t seed, double sigma, bool vary_rows) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, sigma);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t t = 0; t < rows; ++t) {
    const double scale = vary_rows ? std::ldexp(1.0, static_cast<int>(t % 5) - 2) : 1.0;
    for (int64_t i = 0; i < cols; ++i) v[t * cols + i] = static_cast<float>(d(rng) * scale);
  }
  return v;
}

Tensor tensor_of(const std::vector<float>& values, int64_t rows, int64_t cols) {
  Tensor t(rows, cols);
  std::copy(values.begin(), values.begin() + rows * cols, t.data.begin());
  return t;
}

std::vector<std::vector<double>> rows_of(const std::vector<float>& values, int64_t rows, int64_t cols) {
  std::vector<std::vector<double>> out(static_cast<size_t>(rows));
  for (int64_t t = 0; t < rows; ++t) out[t].assign(values.begin() + t * cols, values.begin() + (t + 1) * cols);
  return out;
}

std::vector<double> flatten(const std::vector<std::vector<double>>& rows) {
  std::vector<double> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

}  // namespace k3::op_parity
