#include "backend/cpu/cpu_linear.h"

#include <omp.h>

namespace k3::cpu {
namespace {

// Dense float32 weights: the reference-speed path and the fallback for schemes without a
// dedicated kernel yet (their weights are dequantised once at load through materialize()).
class F32Linear final : public CpuLinear {
 public:
  F32Linear(std::vector<float> w, int64_t rows, int64_t cols) : CpuLinear(rows, cols), w_(std::move(w)) {}

  void forward(const float* x, int64_t m, float* y) const override {
    const int64_t n = rows(), k = cols();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const float* wr = w_.data() + r * k;
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * k;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t c = 0; c < k; ++c) acc += wr[c] * xi[c];
        y[i * n + r] = acc;
      }
    }
  }
  uint64_t weight_bytes() const override { return w_.size() * sizeof(float); }
  std::string kernel_name() const override { return "f32"; }

 private:
  std::vector<float> w_;
};

}  // namespace

std::unique_ptr<CpuLinear> make_f32_linear(std::vector<float> weight, int64_t rows, int64_t cols) {
  return std::make_unique<F32Linear>(std::move(weight), rows, cols);
}

std::unique_ptr<CpuLinear> make_cpu_linear(const Binding& binding, const ParamSpec& spec, PlanFiles& files, int64_t expert,
                                           const LinearOptions& options) {
  const int64_t rows = static_cast<int64_t>(spec.shape[spec.shape.size() - 2]);
  const int64_t cols = static_cast<int64_t>(spec.shape.back());
  if (expert < 0) return make_f32_linear(materialize(binding, spec, files), rows, cols);
  // One expert of a bank: keep that expert's source of every per-expert part, so only its bytes
  // are dequantised.
  Binding one = binding;
  for (auto& part : one.parts) {
    if (part.tensors.size() == spec.shape[0]) part.tensors = {part.tensors[static_cast<size_t>(expert)]};
  }
  ParamSpec one_spec = spec;
  one_spec.shape = {1, spec.shape[1], spec.shape[2]};
  return make_f32_linear(materialize(one, one_spec, files), rows, cols);
}

}  // namespace k3::cpu
