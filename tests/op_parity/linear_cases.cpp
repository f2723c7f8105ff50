// linear: y = x·Wᵀ through cpu::make_cpu_linear (the CPU backend's only way to a linear weight)
// for every scheme, from two sources each:
//  - tiny: the first Linear parameter and the first expert bank (its last expert) that carry the
//    scheme in the make-tiny checkpoints of all families — the planner's bindings as they are;
//  - odd: a synthetic weight of the scheme at an odd shape (synthetic_linear.h).
// M ∈ {1, 3, 37} tokens: up to kFusedMaxTokens (4) tokens run the fused dot kernels, more the tile
// path. The reference is the float64 product of materialize()'s weight with the activations in the
// form the scheme's kernel defines for them (float, 16-bit fixed point per block, int8 per token /
// block / static scale: weight_matrix.h), emulated in float64; the allowance per value is derived
// from the operands (tolerances.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "backend/cpu/cpu_linear.h"
#include "cuda_ops.h"
#include "fixtures.h"
#include "io/ggml_types.h"
#include "quant/formats/ggml/cpu/ggml_dot.h"
#include "synthetic_linear.h"
#include "tolerances.h"

namespace k3::op_parity {
namespace {

constexpr int64_t kTokenCounts[] = {1, 3, 37};

// One bound linear weight: parameter `index` of a plan (expert `expert` of a bank, or −1).
struct WeightRef {
  const LoadPlan* plan = nullptr;
  PlanFiles* files = nullptr;
  size_t index = 0;
  int64_t expert = -1;
  const Binding& binding() const { return plan->bindings[index]; }
  const ParamSpec& spec() const { return plan->params[index]; }
  int64_t rows() const { return static_cast<int64_t>(spec().shape[spec().shape.size() - 2]); }
  int64_t cols() const { return static_cast<int64_t>(spec().shape.back()); }
};
using WeightGetter = std::function<WeightRef()>;

// How the scheme's CPU kernel forms its activations (weight_matrix.h), for the allowance.
struct ActivationForm {
  enum Kind { Float, Fixed16, Int8PerToken, Int8Blocks, Int8Static } kind = Float;
  int64_t block = 0;                 // Fixed16, Int8Blocks
  double scale = 0, zero = 0;        // Int8Static
};

ActivationForm activation_form(const WeightRef& w) {
  const Binding& b = w.binding();
  switch (b.scheme.kind) {
    case SchemeKind::Nvfp4: return {ActivationForm::Fixed16, 16};
    case SchemeKind::Mxfp4: return {ActivationForm::Fixed16, 32};
    case SchemeKind::W4A8: return {ActivationForm::Int8PerToken};
    case SchemeKind::W8A8:
      if (!b.scheme.static_activation) return {ActivationForm::Int8PerToken};
      return {ActivationForm::Int8Static, 0, scalar_source(b, "input_scale", w.expert, *w.files),
              scalar_source(b, "input_offset", w.expert, *w.files)};
    case SchemeKind::Ggml: {
      const GgmlTypeInfo* info = find_ggml_type(b.scheme.storage);
      if (info == nullptr || cpu::ggml::find_kernel(info->type, cpu::CpuIsa::Scalar) == nullptr) return {};
      return {ActivationForm::Int8Blocks, cpu::ggml::act_block(info->type)};
    }
    default: return {};
  }
}

// The activations as the kernel multiplies them, in float64: x̃ = code · step by the format's
// definition (weight_matrix.h, ActivationForm), and per value the slack δ of tolerances.h — one step
// where x/step lies within kInt8TieWindow of a rounding tie (float32 and float64 may round it apart).
struct Emulated {
  std::vector<double> values, slack;
};

Emulated emulate_activations(const ActivationForm& f, const std::vector<float>& x, int64_t m, int64_t k) {
  Emulated out{std::vector<double>(x.begin(), x.end()), std::vector<double>(x.size(), 0.0)};
  if (f.kind == ActivationForm::Float) return out;
  const auto near_tie = [](double u) { return std::fabs(u - std::floor(u) - 0.5) < kInt8TieWindow; };
  if (f.kind == ActivationForm::Int8Static) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double u = x[i] / f.scale, code = std::clamp(std::nearbyint(u) + f.zero, -128.0, 127.0);
      out.values[i] = (code - f.zero) * f.scale;
      if (near_tie(u)) out.slack[i] = f.scale;
    }
    return out;
  }
  const int64_t block = f.kind == ActivationForm::Int8PerToken ? k : f.block;
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t b0 = 0; b0 < k; b0 += block) {
      double amax = 0;
      for (int64_t i = b0; i < b0 + block; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[t * k + i])));
      if (amax == 0) continue;
      if (f.kind == ActivationForm::Fixed16) {
        // The largest shift keeping amax·2^shift < 2^15; scaling by 2^shift is exact, so is the code.
        int exponent = 0;
        std::frexp(amax, &exponent);
        const int shift = 15 - exponent;
        for (int64_t i = b0; i < b0 + block; ++i) {
          const double code = std::clamp(std::nearbyint(std::ldexp(static_cast<double>(x[t * k + i]), shift)), -32767.0, 32767.0);
          out.values[t * k + i] = std::ldexp(code, -shift);
        }
        continue;
      }
      const double step = amax / 127.0;
      for (int64_t i = b0; i < b0 + block; ++i) {
        const double u = x[t * k + i] / step;
        out.values[t * k + i] = std::nearbyint(u) * step;
        if (near_tie(u)) out.slack[t * k + i] = step;
      }
    }
  }
  return out;
}

const char* form_name(ActivationForm::Kind k) {
  switch (k) {
    case ActivationForm::Float: return "float activations";
    case ActivationForm::Fixed16: return "16-bit fixed-point activations";
    case ActivationForm::Int8PerToken: return "int8 activations per token";
    case ActivationForm::Int8Blocks: return "int8 activations per block";
    case ActivationForm::Int8Static: return "int8 activations, static scale";
  }
  return "?";
}

// N(0, 1) activations, token t scaled by 2^((t mod 5) − 2) to exercise per-token and per-block
// scales — except under a static input scale, which a checkpoint calibrates for one range.
std::vector<float> activations(const ActivationForm& form, int64_t m, int64_t k) {
  const bool vary_rows = form.kind != ActivationForm::Int8Static;
  return random_values(m, k, static_cast<uint32_t>(1000 + 7 * m + k), 1.0, vary_rows);
}

Expectation linear_reference(const WeightRef& w, int64_t m) {
  const int64_t n = w.rows(), k = w.cols();
  const std::vector<float> weight = w.expert < 0 ? materialize(w.binding(), w.spec(), *w.files)
                                                 : materialize_expert(w.binding(), w.spec(), *w.files, w.expert);
  const ActivationForm form = activation_form(w);
  const Emulated x = emulate_activations(form, activations(form, m, k), m, k);
  Expectation e;
  e.row_width = n;
  e.want.resize(static_cast<size_t>(m * n));
  e.bound.resize(e.want.size());
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t r = 0; r < n; ++r) {
      double sum = 0, magnitude = 0, ties = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double wi = weight[r * k + i], xi = x.values[t * k + i];
        sum += wi * xi;
        magnitude += std::fabs(wi * xi);
        ties += std::fabs(wi) * x.slack[t * k + i];
      }
      e.want[t * n + r] = sum;
      e.bound[t * n + r] = kLinearSummation * magnitude + ties + 1e-30;
    }
  }
  e.note = "float64 materialize(W)·x with " + std::string(form_name(form.kind)) +
           "; allowance: fp32 summation (+ one step per near-tie code)";
  return e;
}

// The CUDA target's reference: the CUDA linear takes bf16 activations (its GEMMs' input) whatever the
// scheme, and the FP8 GEMMs quantise them to e4m3 (per 1×128 block, or by the static input scale,
// saturating at ±448 steps), so the product is float64 materialize(W)·x (x clamped to the static
// range) with a relative allowance per value (tolerances.h kCudaLinear*).
Expectation linear_cuda_reference(const WeightRef& w, int64_t m) {
  const int64_t n = w.rows(), k = w.cols();
  const std::vector<float> weight = w.expert < 0 ? materialize(w.binding(), w.spec(), *w.files)
                                                 : materialize_expert(w.binding(), w.spec(), *w.files, w.expert);
  std::vector<float> x = activations(activation_form(w), m, k);
  const CudaLinearForm form = cuda_linear_form(w.binding(), n, k, w.expert >= 0);
  const bool fp8 = form == CudaLinearForm::kFp8Block || form == CudaLinearForm::kFp8Tensor;
  if (form == CudaLinearForm::kFp8Tensor) {
    const float limit = 448.0f * scalar_source(w.binding(), "input_scale", w.expert, *w.files);
    for (float& v : x) v = std::clamp(v, -limit, limit);
  }
  Expectation e;
  e.row_width = n;
  e.want.resize(static_cast<size_t>(m * n));
  e.bound.resize(e.want.size());
  for (int64_t t = 0; t < m; ++t) {
    double amax = 0;  // the e4m3 subnormal step's scale (per token: at least the block's)
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[t * k + i])));
    for (int64_t r = 0; r < n; ++r) {
      double sum = 0, magnitude = 0, weights = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double wi = weight[r * k + i], xi = x[t * k + i];
        sum += wi * xi;
        magnitude += std::fabs(wi * xi);
        weights += std::fabs(wi);
      }
      e.want[t * n + r] = sum;
      e.bound[t * n + r] = fp8 ? kCudaLinearFp8 * magnitude + weights * amax * kFp8SubnormalStep
                               : kCudaLinearBf16 * magnitude;
      e.bound[t * n + r] += 1e-30;
    }
  }
  e.note = std::string("float64 materialize(W)·x, CUDA ") + cuda_linear_form_name(form) +
           (fp8 ? ": e4m3 activations" : ": bf16 activations and weight");
  return e;
}

std::vector<float> linear_run(const WeightRef& w, int64_t m, const Target& target) {
  if (target.kind == TargetKind::Cuda) {
    std::string kernel;
    std::vector<float> y = cuda_ops()->linear(*w.plan, *w.files, w.index, w.expert,
                                              activations(activation_form(w), m, w.cols()), m, &kernel);
    ::testing::Test::RecordProperty("kernel", kernel);
    return y;
  }
  const auto linear = cpu::make_cpu_linear(w.binding(), w.spec(), *w.files, w.expert);
  ::testing::Test::RecordProperty("kernel", linear->kernel_name());
  Tensor y;
  cpu_backend().linear(*linear, tensor_of(activations(activation_form(w), m, w.cols()), m, w.cols()), y);
  return y.data;
}

// "model.layers.1.self_attn.q_proj.weight" → "L1.self_attn.q_proj".
std::string short_param(const std::string& name) {
  std::string s = name;
  if (s.rfind("model.layers.", 0) == 0) {
    s.replace(0, 13, "L");
  } else if (s.rfind("model.", 0) == 0) {
    s.erase(0, 6);
  }
  if (s.size() > 7 && s.substr(s.size() - 7) == ".weight") s.resize(s.size() - 7);
  return s;
}

void add_cases(std::vector<OpCase>& out, const Scheme& scheme, const std::string& source, const std::string& tag,
               int64_t n, int64_t k, bool bank, const WeightGetter& get) {
  const std::string dims = std::to_string(n) + "x" + std::to_string(k);
  for (int64_t m : kTokenCounts) {
    OpCase c;
    c.op = "linear";
    c.formats = {format_column(scheme)};
    c.name = safe_name(scheme.name()) + "__" + tag + "__" + dims + "__m" + std::to_string(m);
    c.shape = dims + " m" + std::to_string(m);
    c.source = source + " [" + scheme.name() + "]";
    c.reference = [get, m] { return linear_reference(get(), m); };
    c.run = [get, m](const Target& target) { return linear_run(get(), m, target); };
    c.cuda_skip = cuda_linear_unsupported(scheme, k, bank);
    c.cuda_reference = [get, m] { return linear_cuda_reference(get(), m); };
    out.push_back(std::move(c));
  }
}

}  // namespace

std::vector<OpCase> linear_cases() {
  std::vector<OpCase> out;
  // tiny: per scheme, the first plain linear and the first expert bank over all families.
  std::map<std::string, bool> seen;  // scheme name + kind
  for (const TinyId& id : all_tiny_ids()) {
    Tiny& t = tiny(id);
    if (!t.error.empty()) continue;
    for (size_t i = 0; i < t.plan.params.size(); ++i) {
      const ParamSpec& p = t.plan.params[i];
      if (p.kind != ParamKind::Linear && p.kind != ParamKind::ExpertBank) continue;
      const Scheme& scheme = t.plan.bindings[i].scheme;
      const bool bank = p.kind == ParamKind::ExpertBank;
      if (!seen.emplace(scheme.name() + (bank ? "/bank" : ""), true).second) continue;
      const int64_t expert = bank ? static_cast<int64_t>(p.shape[0]) - 1 : -1;
      const int64_t n = static_cast<int64_t>(p.shape[p.shape.size() - 2]), k = static_cast<int64_t>(p.shape.back());
      const std::string param = short_param(p.name) + (bank ? "[e" + std::to_string(expert) + "]" : "");
      const WeightGetter get = [id, i, expert] {
        Tiny& tt = tiny(id);
        return WeightRef{&tt.plan, tt.files.get(), i, expert};
      };
      add_cases(out, scheme, "tiny " + id.label() + " " + param, "tiny_" + id.safe() + (bank ? "_expert" : ""), n, k,
                bank, get);
    }
  }
  // odd: every scheme at an odd shape.
  for (const SyntheticSpec& spec : synthetic_specs()) {
    const WeightGetter get = [spec] {
      SyntheticLinear& s = synthetic_linear(spec);
      return WeightRef{&s.plan, s.files.get(), 0, -1};
    };
    add_cases(out, spec.scheme, "synthetic, " + spec.why, "odd", spec.n, spec.k, false, get);
  }
  return out;
}

}  // namespace k3::op_parity
