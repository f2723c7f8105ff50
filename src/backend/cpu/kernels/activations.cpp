// Activation preparation shared by every weight format (weight_matrix.h). O(m·k), once per call.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels/weight_matrix.h"

namespace k3::cpu {

void prepare_f32(const float* x, int64_t m, int64_t k, PreparedActivations& a) {
  a.form = ActivationForm::F32;
  a.m = m;
  a.k = k;
  a.f32 = x;
}

void prepare_fixed16(const float* x, int64_t m, int64_t k, int64_t block, PreparedActivations& a) {
  a.form = ActivationForm::Fixed16;
  a.m = m;
  a.k = k;
  a.block = block;
  a.q16.resize(static_cast<size_t>(m * k));
  a.scale.resize(static_cast<size_t>(m * (k / block)));
  for (int64_t b = 0; b < m * (k / block); ++b) {
    const float* xb = x + b * block;
    float amax = 0.0f;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
    int exponent = 0;
    std::frexp(amax, &exponent);  // amax < 2^exponent
    const int shift = 15 - exponent;  // amax · 2^shift < 2^15
    a.scale[b] = amax > 0.0f ? std::ldexp(1.0f, -shift) : 0.0f;
    for (int64_t i = 0; i < block; ++i) {
      const float code = amax > 0.0f ? std::nearbyint(std::ldexp(xb[i], shift)) : 0.0f;
      a.q16[b * block + i] = static_cast<int16_t>(std::clamp(code, -32767.0f, 32767.0f));
    }
  }
}

void prepare_int8(const float* x, int64_t m, int64_t k, int64_t block, ActivationForm form, PreparedActivations& a) {
  a.form = form;
  a.m = m;
  a.k = k;
  a.block = block;
  a.zero = 0;
  const int64_t nblocks = k / block;
  a.q.resize(static_cast<size_t>(m * k));
  a.scale.resize(static_cast<size_t>(m * nblocks));
  a.sums.assign(static_cast<size_t>(m * (k / 16)), 0);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t b = 0; b < nblocks; ++b) {
      const float* xb = x + t * k + b * block;
      float amax = 0.0f;
      for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float scale = amax / 127.0f;
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      a.scale[t * nblocks + b] = scale;
      int8_t* qb = a.q.data() + t * k + b * block;
      // Int8PerToken divides: x_q = round(x / s_t), the per-token producers' rule (x · (1 / s_t) differs in
      // ~1e-6 of values).
      const bool divide = form == ActivationForm::Int8PerToken && amax > 0.0f;
      for (int64_t i = 0; i < block; ++i) {
        qb[i] = static_cast<int8_t>(std::clamp(std::nearbyint(divide ? xb[i] / scale : xb[i] * inv), -127.0f, 127.0f));
      }
    }
    for (int64_t i = 0; i < k; ++i) a.sums[t * (k / 16) + i / 16] += a.q[t * k + i];
  }
}

void prepare_int8_static(const float* x, int64_t m, int64_t k, float scale, int32_t zero, PreparedActivations& a) {
  a.form = ActivationForm::Int8PerToken;
  a.m = m;
  a.k = k;
  a.block = k;
  a.zero = zero;
  a.q.resize(static_cast<size_t>(m * k));
  a.scale.assign(static_cast<size_t>(m), scale);
  a.sums.assign(static_cast<size_t>(m * (k / 16)), 0);
  for (int64_t i = 0; i < m * k; ++i) {
    a.q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] / scale) + static_cast<float>(zero), -128.0f, 127.0f));
    a.sums[i / 16] += a.q[i];
  }
}

void PreparedActivations::values(int64_t t, float* out) const {
  switch (form) {
    case ActivationForm::F32:
      std::copy(f32 + t * k, f32 + (t + 1) * k, out);
      return;
    case ActivationForm::Fixed16:
      for (int64_t i = 0; i < k; ++i) out[i] = q16[t * k + i] * scale[t * (k / block) + i / block];
      return;
    case ActivationForm::Int8PerToken:
    case ActivationForm::Int8Blocks:
      for (int64_t i = 0; i < k; ++i) out[i] = (q[t * k + i] - zero) * scale[t * (k / block) + i / block];
      return;
  }
}

}  // namespace k3::cpu
