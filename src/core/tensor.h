// Tensor: a row-major float32 matrix in host memory — the CPU backend's activations and the logits
// every executor returns.
#pragma once

#include <cstdint>
#include <vector>

namespace k3 {

struct Tensor {
  int64_t rows = 0, cols = 0;
  std::vector<float> data;

  Tensor() = default;
  Tensor(int64_t r, int64_t c) : rows(r), cols(c), data(static_cast<size_t>(r * c), 0.0f) {}
  float* row(int64_t r) { return data.data() + r * cols; }
  const float* row(int64_t r) const { return data.data() + r * cols; }
};

}  // namespace k3
