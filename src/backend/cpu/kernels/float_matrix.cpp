// Float-valued weight storage: F32 (owned), BF16 / F16 (in place). Activations stay float32; the
// fused kernels are the float_dot.h row dots.
#include "backend/cpu/kernels/float_matrix.h"

#include <cstring>

#include "backend/cpu/kernels/float_dot.h"
#include "core/error.h"
#include "core/numeric.h"

namespace k3::cpu {

void check_weight_bytes(std::span<const uint8_t> bytes, uint64_t want, const char* what) {
  if (bytes.size() != want) {
    throw Error(Where{"", what, "nbytes"}, "weight holds " + std::to_string(bytes.size()) + " bytes, the shape needs " +
                                               std::to_string(want));
  }
}

namespace {

class F32Matrix final : public WeightMatrix {
 public:
  F32Matrix(std::vector<float> w, int64_t rows, int64_t cols, CpuIsa isa)
      : WeightMatrix(rows, cols, isa), w_(std::move(w)), dots_(float_dots(isa)) {
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
  const FloatDots& dots_;
};

class HalfMatrix final : public WeightMatrix {
 public:
  HalfMatrix(std::span<const uint8_t> w, bool is_bf16, int64_t rows, int64_t cols, KeepAlive keep_alive, CpuIsa isa)
      : WeightMatrix(rows, cols, isa),
        w_(reinterpret_cast<const uint16_t*>(w.data())),
        is_bf16_(is_bf16),
        keep_alive_(std::move(keep_alive)),
        dots_(float_dots(isa)) {
    check_weight_bytes(w, static_cast<uint64_t>(rows * cols) * 2, is_bf16 ? "bf16 weight" : "f16 weight");
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
  const FloatDots& dots_;
};

}  // namespace

std::unique_ptr<WeightMatrix> make_f32_matrix(std::vector<float> w, int64_t rows, int64_t cols, CpuIsa isa) {
  return std::make_unique<F32Matrix>(std::move(w), rows, cols, isa);
}
std::unique_ptr<WeightMatrix> make_half_matrix(std::span<const uint8_t> w, bool is_bf16, int64_t rows, int64_t cols,
                                               KeepAlive keep_alive, CpuIsa isa) {
  return std::make_unique<HalfMatrix>(w, is_bf16, rows, cols, std::move(keep_alive), isa);
}

}  // namespace k3::cpu
