// RMSNorm and the AttnRes mix fused with the following RMSNorm (spec §2.1, §3.2), fp32.
#include <cmath>

#include "backend/cpu/ops.h"

namespace k3::cpu {
namespace {

float inv_rms(const float* x, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
}

void norm_row(const float* x, const float* w, int64_t n, double eps, float* y) {
  const float r = inv_rms(x, n, eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r * w[i];
}

}  // namespace

void linear(const CpuLinear& w, const Tensor& x, Tensor& y) {
  y = Tensor(x.rows, w.rows());
  if (x.rows > 0) w.forward(x.data.data(), x.rows, y.data.data());
}

void linear_accumulators(const CpuLinear& w, const Tensor& x, Tensor& y) {
  y = Tensor(x.rows, w.rows());
  if (x.rows > 0) w.forward_accumulators(x.data.data(), x.rows, y.data.data());
}

void add(Tensor& acc, const Tensor& x) {
#pragma omp parallel for schedule(static) if (acc.data.size() >= kParallelMinElements)
  for (int64_t i = 0; i < static_cast<int64_t>(acc.data.size()); ++i) acc.data[i] += x.data[i];
}

void rms_norm(const Tensor& x, const Floats& w, double eps, Tensor& y) {
  y = Tensor(x.rows, x.cols);
#pragma omp parallel for schedule(static) if (x.rows > 1)
  for (int64_t t = 0; t < x.rows; ++t) norm_row(x.row(t), w.data(), x.cols, eps, y.row(t));
}

void attn_res_mix_norm(std::span<const Tensor* const> candidates, const Floats& c, const Floats& norm_w, double eps,
                       Tensor& y) {
  const int64_t rows = candidates.front()->rows, n = candidates.front()->cols;
  const size_t count = candidates.size();
  y = Tensor(rows, n);
#pragma omp parallel if (rows > 1)
  {
    std::vector<float> p(count), mix(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < rows; ++t) {
      float mx = -INFINITY;
      for (size_t j = 0; j < count; ++j) {
        const float* v = candidates[j]->row(t);
        double dot = 0;
        for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(v[i]) * c[i];
        p[j] = static_cast<float>(dot) * inv_rms(v, n, eps);
        mx = std::max(mx, p[j]);
      }
      float sum = 0;
      for (float& s : p) sum += (s = std::exp(s - mx));
      std::fill(mix.begin(), mix.end(), 0.0f);
      for (size_t j = 0; j < count; ++j) {
        const float* v = candidates[j]->row(t);
        const float pj = p[j] / sum;
        for (int64_t i = 0; i < n; ++i) mix[i] += pj * v[i];
      }
      norm_row(mix.data(), norm_w.data(), n, eps, y.row(t));
    }
  }
}

}  // namespace k3::cpu
