// FP8 E4M3 weights read in place × tile multipliers (fp8_matrix.h). Activations float32, or the
// checkpoint's FP8 activation contract; the fused kernels are float_dot.h's E4M3 block dots.
#include "quant/formats/fp8/cpu/fp8_matrix.h"

#include "backend/cpu/kernels/float_dot.h"
#include "backend/cpu/kernels/float_matrix.h"
#include "core/error.h"
#include "core/numeric.h"
#include "quant/formats/fp8/fp8.h"

namespace k3::cpu {

void prepare_fp8(const float* x, int64_t m, int64_t k, float static_scale, PreparedActivations& a) {
  constexpr int64_t kBlock = 128;
  a.owned.resize(static_cast<size_t>(m * k));
  if (static_scale > 0.0f) {
    for (int64_t i = 0; i < m * k; ++i) a.owned[i] = decode_e4m3fn(encode_e4m3fn_sat(x[i] / static_scale)) * static_scale;
  } else {
    std::vector<uint8_t> codes(static_cast<size_t>(k));
    std::vector<float> scales(static_cast<size_t>((k + kBlock - 1) / kBlock));
    for (int64_t t = 0; t < m; ++t) {
      quantize_fp8_block(x + t * k, 1, k, 1, kBlock, codes.data(), scales.data());
      dequant_fp8_block(codes.data(), scales.data(), 1, k, 1, kBlock, a.owned.data() + t * k);
    }
  }
  prepare_f32(a.owned.data(), m, k, a);
}

namespace {

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
        dots_(float_dots(isa)) {
    check_weight_bytes(codes, static_cast<uint64_t>(rows * cols), "fp8 weight");
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
  const FloatDots& dots_;
};

}  // namespace

std::unique_ptr<WeightMatrix> make_fp8_matrix(std::span<const uint8_t> codes, std::vector<float> scale, int64_t block_n,
                                              int64_t block_k, int64_t rows, int64_t cols, KeepAlive keep_alive,
                                              CpuIsa isa, const Fp8Options& options) {
  return std::make_unique<Fp8Matrix>(codes, std::move(scale), block_n, block_k, rows, cols, std::move(keep_alive), isa,
                                     options);
}

}  // namespace k3::cpu
