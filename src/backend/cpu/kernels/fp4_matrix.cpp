// E2M1 weights repacked into the 16-row interleaved layout of fp4_dot.h.
#include "backend/cpu/kernels/fp4_matrix.h"

#include <string>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"

namespace k3::cpu {
namespace {

class Fp4Matrix final : public WeightMatrix {
 public:
  Fp4Matrix(std::span<const uint8_t> packed, std::span<const uint8_t> scales, const Fp4Format& format,
            float output_scale, int64_t rows, int64_t cols, CpuIsa isa)
      : WeightMatrix(rows, cols, isa), format_(format), dot_(fp4_dot_rows(isa)) {
    const std::string weight = std::string(format.name) + " weight";
    const char* what = weight.c_str();
    layout_.block = format.block;
    layout_.scale_code = format.scale_code;
    layout_.k = cols;
    if (cols % layout_.block != 0) throw Error(Where{"", what, "shape"}, "columns must be a multiple of the block");
    if (packed.size() != static_cast<size_t>(rows * cols / 2)) throw Error(Where{"", what, "weight"}, "packed size is not rows·cols/2");
    const int64_t blocks = cols / layout_.block;
    if (scales.size() != static_cast<size_t>(rows * blocks)) throw Error(Where{"", what, "weight_scale"}, "scale size is not rows·cols/block");
    output_scale_ = output_scale * (format.activation_values != nullptr ? format.activation_scale : 1.0f);
    const int64_t groups = (rows + kFp4GroupRows - 1) / kFp4GroupRows, lines = cols / kFp4LineK;
    codes_.assign(static_cast<size_t>(groups * lines * kFp4LineBytes), 0);
    scales_.assign(static_cast<size_t>(groups * blocks * kFp4GroupRows), 0);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t g = r / kFp4GroupRows, i = r % kFp4GroupRows;
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t code = (packed[r * cols / 2 + c / 2] >> (4 * (c % 2))) & 0xF;
        const int64_t o = c / kFp4LineK, j = (c % kFp4LineK) / 2, p = c % 2;
        codes_[(g * lines + o) * kFp4LineBytes + 2 * (2 * i + p) + j / 2] |= static_cast<uint8_t>(code << (4 * (j % 2)));
      }
      for (int64_t b = 0; b < blocks; ++b) scales_[(g * blocks + b) * kFp4GroupRows + i] = scales[r * blocks + b];
    }
    layout_.codes = codes_.data();
    layout_.scales = scales_.data();
  }

  void prepare(const float* x, int64_t m, PreparedActivations& a) const override {
    if (format_.activation_values == nullptr) return prepare_fixed16(x, m, cols(), layout_.block, a);
    std::vector<float> quantised(static_cast<size_t>(m * cols()));
    for (int64_t t = 0; t < m; ++t) {
      format_.activation_values(x + t * cols(), cols(), format_.activation_scale, quantised.data() + t * cols());
    }
    prepare_fixed16(quantised.data(), m, cols(), layout_.block, a);
  }
  void dot_rows(const PreparedActivations& a, int64_t r0, int64_t r1, float* y, int64_t ldy) const override {
    dot_(layout_, a.q16.data(), a.scale.data(), a.m, r0, r1, y, ldy);
  }
  void decode_rows(int64_t r0, int64_t r1, float* out) const override {
    const int64_t k = cols(), lines = k / kFp4LineK, blocks = k / layout_.block;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t g = r / kFp4GroupRows, i = r % kFp4GroupRows;
      for (int64_t c = 0; c < k; ++c) {
        const int64_t o = c / kFp4LineK, j = (c % kFp4LineK) / 2, p = c % 2;
        const uint8_t code = (codes_[(g * lines + o) * kFp4LineBytes + 2 * (2 * i + p) + j / 2] >> (4 * (j % 2))) & 0xF;
        const uint8_t scale = scales_[(g * blocks + c / layout_.block) * kFp4GroupRows + i];
        out[(r - r0) * k + c] = decode_e2m1(code) * fp4_scale_value(layout_.scale_code, scale);
      }
    }
  }
  float output_scale() const override { return output_scale_; }
  uint64_t weight_bytes() const override { return codes_.size() + scales_.size(); }
  std::string kernel_name() const override {
    const bool contract = format_.activation_values != nullptr && *format_.contract != '\0';
    return std::string(format_.name) + (contract ? std::string("-") + format_.contract : std::string()) + "/" +
           isa_name(isa());
  }

 private:
  Fp4Format format_;
  Fp4DotRows dot_;
  Fp4Layout layout_;
  float output_scale_ = 1.0f;
  std::vector<uint8_t> codes_, scales_;
};

}  // namespace

std::unique_ptr<WeightMatrix> make_fp4_matrix(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                              const Fp4Format& format, float output_scale, int64_t rows, int64_t cols,
                                              CpuIsa isa) {
  return std::make_unique<Fp4Matrix>(packed, scales, format, output_scale, rows, cols, isa);
}

}  // namespace k3::cpu
