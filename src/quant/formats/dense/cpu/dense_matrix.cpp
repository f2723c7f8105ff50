// Float-valued weight storage: F32 (owned), BF16 / F16 (in place), FP8 E4M3 × tile multipliers
// (in place). Activations stay float32; the fused kernels are the dense_dot.h row dots.
#include <cstring>

#include "quant/formats/dense/cpu/dense_dot.h"
#include "backend/cpu/kernels/formats.h"
#include "core/error.h"
#include "core/numeric.h"
#include "quant/formats/fp8/fp8.h"

namespace k3::cpu {
namespace {

void check_bytes(std::span<const uint8_t> bytes, uint64_t want, const char* what) {
  if (bytes.size() != want) {
    throw Error(Where{"", what, "nbytes"}, "weight holds " + std::to_string(bytes.size()) + " bytes, the shape needs " +
                                               std::to_string(want));
  }
}

// For every prepared token t and row r in [r0, r1): y[t·ldy + r] = row_dot(r, x_t).
template <typename RowDot>
void for_rows_and_tokens(const PreparedActivations& a, int64_t r0, int64_t r1, float* y, int64_t ldy, RowDot row_dot) {
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t t = 0; t < a.m; ++t) y[t * ldy + r] = row_dot(r, a.f32 + t * a.k);
  }
}

class F32Matrix final : public WeightMatrix {
 public:
  F32Matrix(std::vector<float> w, int64_t rows, int64_t cols, CpuIsa isa)
      : WeightMatrix(rows, cols, isa), w_(std::move(w)), dots_(dense_dots(isa)) {
    if (w_.size() != static_cast<size_t>(rows * cols)) throw Error(Where{"", "f32 weight", "size"}, "size is not rows·cols");
  }
  void prepare(const float* x, int64_t m, PreparedActivations& a) const override { prepare_f32(x, m, cols(), a); }
  void dot_rows(const PreparedActivations& a, int64_t r0, int64_t r1, float* y, int64_t ldy) const override {
    const int64_t k = cols();
    for_rows_and_tokens(a, r0, r1, y, ldy, [&](int64_t r, const float* x) { return dots_.f32(w_.data() + r * k, x, k); });
  }
  void decode_rows(int64_t r0, int64_t r1, float* out) const override {
    std::memcpy(out, w_.data() + r0 * cols(), sizeof(float) * static_cast<size_t>((r1 - r0) * cols()));
  }
  uint64_t weight_bytes() const override { return w_.size() * sizeof(float); }
  std::string kernel_name() const override { return std::string("f32/") + isa_name(isa()); }

 private:
  std::vector<float> w_;
  const DenseDots& dots_;
};

class HalfMatrix final : public WeightMatrix {
 public:
  HalfMatrix(std::span<const uint8_t> w, bool is_bf16, int64_t rows, int64_t cols, KeepAlive keep_alive, CpuIsa isa)
      : WeightMatrix(rows, cols, isa),
        w_(reinterpret_cast<const uint16_t*>(w.data())),
        is_bf16_(is_bf16),
        keep_alive_(std::move(keep_alive)),
        dots_(dense_dots(isa)) {
    check_bytes(w, static_cast<uint64_t>(rows * cols) * 2, is_bf16 ? "bf16 weight" : "f16 weight");
  }
  void prepare(const float* x, int64_t m, PreparedActivations& a) const override { prepare_f32(x, m, cols(), a); }
  void dot_rows(const PreparedActivations& a, int64_t r0, int64_t r1, float* y, int64_t ldy) const override {
    const int64_t k = cols();
    const auto dot = is_bf16_ ? dots_.bf16 : dots_.f16;
    for_rows_and_tokens(a, r0, r1, y, ldy, [&](int64_t r, const float* x) { return dot(w_ + r * k, x, k); });
  }
  void decode_rows(int64_t r0, int64_t r1, float* out) const override {
    const int64_t k = cols();
    for (int64_t i = 0; i < (r1 - r0) * k; ++i) {
      const uint16_t v = w_[r0 * k + i];
      out[i] = is_bf16_ ? decode_bf16(v) : decode_f16(v);
    }
  }
  uint64_t weight_bytes() const override { return static_cast<uint64_t>(rows() * cols()) * 2; }
  std::string kernel_name() const override { return std::string(is_bf16_ ? "bf16/" : "f16/") + isa_name(isa()); }

 private:
  const uint16_t* w_;
  bool is_bf16_;
  KeepAlive keep_alive_;
  const DenseDots& dots_;
};

// y = Σ_tiles scale[r / block_n][c / block_k] · Σ_{c in tile} e4m3(q[r][c]) · x[c]: the tile
// multiplier is applied once per (row, tile) to the partial dot, never per element.
class Fp8Matrix final : public WeightMatrix {
 public:
  Fp8Matrix(std::span<const uint8_t> codes, std::vector<float> scale, int64_t block_n, int64_t block_k, int64_t rows,
            int64_t cols, KeepAlive keep_alive, CpuIsa isa, const Fp8Options& options)
      : WeightMatrix(rows, cols, isa),
        options_(options),
        q_(codes.data()),
        scale_(std::move(scale)),
        block_n_(block_n),
        block_k_(block_k),
        k_blocks_((cols + block_k - 1) / block_k),
        keep_alive_(std::move(keep_alive)),
        dots_(dense_dots(isa)) {
    check_bytes(codes, static_cast<uint64_t>(rows * cols), "fp8 weight");
    if (block_n <= 0 || block_k <= 0) throw Error(Where{"", "fp8 weight", "block"}, "block sizes must be positive");
    if (scale_.size() != static_cast<size_t>((rows + block_n - 1) / block_n * k_blocks_)) {
      throw Error(Where{"", "fp8 weight", "weight_scale"}, "scale grid does not match the weight shape and blocks");
    }
    for (float& s : scale_) s *= kE4m3ViaF16Scale;  // the row dots return values / 2^8
  }
  void prepare(const float* x, int64_t m, PreparedActivations& a) const override {
    if (options_.a8) {
      prepare_fp8(x, m, cols(), options_.input_scale, a);
    } else {
      prepare_f32(x, m, cols(), a);
    }
  }
  void dot_rows(const PreparedActivations& a, int64_t r0, int64_t r1, float* y, int64_t ldy) const override {
    const int64_t k = cols();
    for_rows_and_tokens(a, r0, r1, y, ldy, [&](int64_t r, const float* x) {
      return dots_.e4m3_blocks_div256(q_ + r * k, x, scale_.data() + (r / block_n_) * k_blocks_, k, block_k_);
    });
  }
  void decode_rows(int64_t r0, int64_t r1, float* out) const override {
    std::vector<float> srow(static_cast<size_t>(k_blocks_));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < k_blocks_; ++b) srow[b] = scale_[(r / block_n_) * k_blocks_ + b] / kE4m3ViaF16Scale;
      dequant_fp8_block(q_ + r * cols(), srow.data(), 1, cols(), 1, block_k_, out + (r - r0) * cols());
    }
  }
  uint64_t weight_bytes() const override { return static_cast<uint64_t>(rows() * cols()) + scale_.size() * 4; }
  std::string kernel_name() const override { return std::string(options_.a8 ? "fp8-a8/" : "fp8/") + isa_name(isa()); }

 private:
  Fp8Options options_;
  const uint8_t* q_;
  std::vector<float> scale_;  // × kE4m3ViaF16Scale
  int64_t block_n_, block_k_, k_blocks_;
  KeepAlive keep_alive_;
  const DenseDots& dots_;
};

}  // namespace

std::unique_ptr<WeightMatrix> make_f32_matrix(std::vector<float> w, int64_t rows, int64_t cols, CpuIsa isa) {
  return std::make_unique<F32Matrix>(std::move(w), rows, cols, isa);
}
std::unique_ptr<WeightMatrix> make_half_matrix(std::span<const uint8_t> w, bool is_bf16, int64_t rows, int64_t cols,
                                               KeepAlive keep_alive, CpuIsa isa) {
  return std::make_unique<HalfMatrix>(w, is_bf16, rows, cols, std::move(keep_alive), isa);
}
std::unique_ptr<WeightMatrix> make_fp8_matrix(std::span<const uint8_t> codes, std::vector<float> scale, int64_t block_n,
                                              int64_t block_k, int64_t rows, int64_t cols, KeepAlive keep_alive,
                                              CpuIsa isa, const Fp8Options& options) {
  return std::make_unique<Fp8Matrix>(codes, std::move(scale), block_n, block_k, rows, cols, std::move(keep_alive), isa,
                                     options);
}

}  // namespace k3::cpu
