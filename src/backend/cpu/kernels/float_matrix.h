// Float-valued weight storage (WeightMatrix of weight_matrix.h): float32 weights (owned) and BF16 /
// F16 weights read in place, with float32 activations; and the helpers of every float-activation
// WeightMatrix.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/kernels/weight_matrix.h"

namespace k3::cpu {

// float32 weights [rows, cols] (owned): the dequantised fallback of every scheme, and tests.
std::unique_ptr<WeightMatrix> make_f32_matrix(std::vector<float> w, int64_t rows, int64_t cols, CpuIsa isa);
// BF16 or F16 weights [rows, cols] read in place; float32 activations.
std::unique_ptr<WeightMatrix> make_half_matrix(std::span<const uint8_t> w, bool is_bf16, int64_t rows, int64_t cols,
                                               KeepAlive keep_alive, CpuIsa isa);

// A k3::Error on `what`'s nbytes unless the weight holds `want` bytes.
void check_weight_bytes(std::span<const uint8_t> bytes, uint64_t want, const char* what);

// For every prepared token t (form F32) and row r in [r0, r1): y[t·ldy + r] = row_dot(r, x_t).
template <typename RowDot>
void for_rows_and_tokens(const PreparedActivations& a, int64_t r0, int64_t r1, float* y, int64_t ldy, RowDot row_dot) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t t = 0; t < a.m; ++t) y[t * ldy + r] = row_dot(r, a.f32 + t * a.k);
  }
}

}  // namespace k3::cpu
