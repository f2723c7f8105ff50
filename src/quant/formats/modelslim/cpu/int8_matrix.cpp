// ModelSlim W4A8 / W8A8 weights repacked into the 16-row interleaved layout of int8_dot.h, times
// int8 activations (dynamic per token; W8A8 static: per tensor with a zero point).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/formats/modelslim/cpu/modelslim_matrix.h"
#include "quant/formats/modelslim/cpu/int8_dot.h"
#include "core/error.h"
#include "quant/formats/modelslim/modelslim.h"

namespace k3::cpu {
namespace {

// k per integer block: the largest divisor of k (K, or the scale group) that is a multiple of 16
// and at most `limit`, so that int32 block sums stay exact (int8: |Σ| ≤ 3·255·128·block; int4:
// the AVX-512 high-nibble chain sums 16·15·128·block).
int64_t integer_block(int64_t k, int64_t limit) {
  for (int64_t d = 1; d <= k / 16; ++d) {
    if (k % d == 0 && (k / d) % 16 == 0 && k / d <= limit) return k / d;
  }
  return 16;
}

// The layout and kernel shared by both formats. Subclasses fill codes from signed codes 16 rows at
// a time (pack_group), then the per-row scales and offsets.
class IntMatrix : public WeightMatrix {
 public:
  void dot_rows(const PreparedActivations& a, int64_t r0, int64_t r1, float* y, int64_t ldy) const override {
    dot_(layout_, a.q.data(), a.sums.data(), a.scale.data(), a.m, r0, r1, y, ldy);
  }
  uint64_t weight_bytes() const override {
    return codes_.size() + 4 * (scales_.size() + offsets_.size() + row_terms_.size());
  }

 protected:
  // One scale per row and scale group of `group` columns (group = cols: per channel).
  IntMatrix(int64_t rows, int64_t cols, CpuIsa isa, bool int4, int64_t group, const char* what)
      : WeightMatrix(rows, cols, isa), dot_(int8_dot_rows(isa)) {
    if (cols % 16 != 0 || cols == 0) throw Error(Where{"", what, "shape"}, "columns must be a positive multiple of 16");
    if (group % 16 != 0 || group <= 0 || cols % group != 0) {
      throw Error(Where{"", what, "group_size"}, "group size " + std::to_string(group) + " is not a multiple of 16 dividing the columns");
    }
    layout_.int4 = int4;
    layout_.k = cols;
    layout_.block = integer_block(group, int4 ? 16384 : 4096);
    layout_.scale_blocks = cols / group;
    codes_.assign(static_cast<size_t>(groups() * lines() * kInt8LineBytes), 0);
    scales_.assign(static_cast<size_t>(groups() * layout_.scale_blocks * kInt8GroupRows), 0.0f);
    offsets_.assign(static_cast<size_t>(groups() * kInt8GroupRows), 0);
  }
  int64_t groups() const { return (rows() + kInt8GroupRows - 1) / kInt8GroupRows; }
  int64_t lines() const { return cols() / layout_.line_k(); }
  void finish() {
    layout_.codes = codes_.data();
    layout_.scales = scales_.data();
    layout_.offsets = offsets_.data();
    layout_.row_terms = row_terms_.empty() ? nullptr : row_terms_.data();
  }

  // Row i < valid of group g from src[i] (one byte per column): int8 codes → q ^ 0x80 = q + 128;
  // int4 codes in the nibble at shift[i] (0 or 4) → (q ^ 8) & 0xF = q + 8 (q ∈ [-8, 7]), k 0..3 of
  // each line in the low nibbles, 4..7 in the high ones.
  void pack_group(int64_t g, const int8_t* const* src, const int* shift, int64_t valid) {
    const int64_t n_lines = lines();
    uint8_t* out = codes_.data() + g * n_lines * kInt8LineBytes;
    for (int64_t i = 0; i < valid; ++i) {
      for (int64_t o = 0; o < n_lines; ++o) {
        uint32_t packed;
        if (layout_.int4) {
          uint64_t v;
          std::memcpy(&v, src[i] + 8 * o, 8);
          v = ((v >> shift[i]) & 0x0F0F0F0F0F0F0F0Full) ^ 0x0808080808080808ull;
          packed = static_cast<uint32_t>(v) | static_cast<uint32_t>(v >> 32) << 4;
        } else {
          std::memcpy(&packed, src[i] + 4 * o, 4);
          packed ^= 0x80808080u;
        }
        std::memcpy(out + o * kInt8LineBytes + 4 * i, &packed, 4);
      }
    }
  }
  // Signed code of row r, column c.
  int code(int64_t r, int64_t c) const {
    const int64_t lk = layout_.line_k();
    const uint8_t byte = codes_[((r / kInt8GroupRows) * lines() + c / lk) * kInt8LineBytes + 4 * (r % kInt8GroupRows) + c % 4];
    return layout_.int4 ? ((byte >> (c % 8 < 4 ? 0 : 4)) & 0xF) - 8 : byte - 128;
  }
  std::string tier() const { return isa_name(isa()); }

  Int8DotRows dot_;
  Int8Layout layout_;
  std::vector<uint8_t> codes_;
  std::vector<float> scales_;
  std::vector<int32_t> offsets_, row_terms_;
};

class W4a8Matrix final : public IntMatrix {
 public:
  W4a8Matrix(std::span<const int8_t> weight, bool packed, std::vector<float> scale, std::vector<float> second,
             int64_t group_size, int64_t rows, int64_t cols, CpuIsa isa)
      : IntMatrix(rows, cols, isa, true, group_size > 0 ? group_size : cols, "w4a8 weight"),
        group_size_(group_size), scale_(std::move(scale)), second_(std::move(second)) {
    const char* what = "w4a8 weight";
    if (packed && rows % 2 != 0) throw Error(Where{"", what, "shape"}, "the packed int4 layout needs an even row count");
    if (weight.size() != static_cast<size_t>((packed ? rows / 2 : rows) * cols)) {
      throw Error(Where{"", what, "weight"}, "holds " + std::to_string(weight.size()) + " bytes, expected " +
                                                 std::to_string((packed ? rows / 2 : rows) * cols));
    }
    const int64_t nblocks = group_size > 0 ? cols / group_size : 0;
    if (scale_.size() != static_cast<size_t>(rows)) throw Error(Where{"", what, "weight_scale"}, "expected one scale per row");
    if (second_.size() != static_cast<size_t>(rows * nblocks)) {
      throw Error(Where{"", what, "weight_scale_second"}, "expected rows·cols/group_size scales");
    }
    if (!packed) {
      for (size_t i = 0; i < weight.size(); ++i) {
        const int v = weight[i] - kW4OldLayoutCodeOffset;
        if (v < kInt4Min || v > kInt4Max) {
          throw Error(Where{"", what, "weight"}, "int4 code " + std::to_string(v) + " at [" + std::to_string(i / cols) + ", " +
                                                     std::to_string(i % cols) + "] is outside [-8, 7]");
        }
      }
    }
    static_assert(kW4OldLayoutCodeOffset == 0, "old-layout bytes are packed as the codes themselves");
    for (int64_t g = 0; g < groups(); ++g) {
      const int64_t r0 = g * kInt8GroupRows, valid = std::min(kInt8GroupRows, rows - r0);
      const int8_t* src[kInt8GroupRows];
      int shift[kInt8GroupRows];
      for (int64_t i = 0; i < valid; ++i) {
        const int64_t r = r0 + i;
        src[i] = weight.data() + (packed ? r / 2 : r) * cols;  // packed: rows 2j, 2j + 1 share byte row j
        shift[i] = packed && (r % 2 == 0) != kW4LowNibbleIsEvenRow ? 4 : 0;
      }
      pack_group(g, src, shift, valid);
      for (int64_t i = 0; i < valid; ++i) {
        const int64_t r = r0 + i;
        offsets_[r] = 8;
        for (int64_t b = 0; b < layout_.scale_blocks; ++b) {
          scales_[(g * layout_.scale_blocks + b) * kInt8GroupRows + i] = group_size > 0 ? scale_[r] * second_[r * nblocks + b] : scale_[r];
        }
      }
    }
    finish();
  }

  void prepare(const float* x, int64_t m, PreparedActivations& a) const override {
    prepare_int8(x, m, cols(), cols(), ActivationForm::Int8PerToken, a);
  }
  // As dequant_w4a8: (q · scale) · scale_second.
  void decode_rows(int64_t r0, int64_t r1, float* out) const override {
    const int64_t k = cols(), nblocks = group_size_ > 0 ? k / group_size_ : 0;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const float w = static_cast<float>(code(r, c)) * scale_[r];
        out[(r - r0) * k + c] = group_size_ > 0 ? w * second_[r * nblocks + c / group_size_] : w;
      }
    }
  }
  std::string kernel_name() const override {
    return (group_size_ > 0 ? "w4a8-g" + std::to_string(group_size_) : std::string("w4a8")) + "/" + tier();
  }

 private:
  int64_t group_size_;
  std::vector<float> scale_, second_;  // as stored: [N], [N, K/group_size]
};

class W8a8Matrix final : public IntMatrix {
 public:
  W8a8Matrix(std::span<const int8_t> weight, std::vector<float> scale, std::vector<float> offset,
             std::optional<W8A8StaticInput> input, int64_t rows, int64_t cols, CpuIsa isa)
      : IntMatrix(rows, cols, isa, false, cols, "w8a8 weight"),
        scale_(std::move(scale)), offset_(std::move(offset)), input_(input) {
    const char* what = "w8a8 weight";
    if (weight.size() != static_cast<size_t>(rows * cols)) {
      throw Error(Where{"", what, "weight"}, "holds " + std::to_string(weight.size()) + " bytes, expected " + std::to_string(rows * cols));
    }
    if (scale_.size() != static_cast<size_t>(rows)) throw Error(Where{"", what, "weight_scale"}, "expected one scale per row");
    if (offset_.size() != static_cast<size_t>(rows)) throw Error(Where{"", what, "weight_offset"}, "expected one offset per row");
    for (float off : offset_) {
      if (off != std::nearbyint(off) || off < -128.0f || off > 127.0f) {
        throw Error(Where{"", what, "weight_offset"}, "offset " + std::to_string(off) + " is not an integer in [-128, 127]");
      }
    }
    if (input_ && (input_->offset < -128 || input_->offset > 127 || !(input_->scale > 0.0f) || !std::isfinite(input_->scale))) {
      throw Error(Where{"", what, "input_scale"}, "static input needs a positive finite scale and an offset in [-128, 127]");
    }
    const int32_t zero = input_ ? input_->offset : 0;
    const int64_t blocks = cols / layout_.block;
    if (zero != 0) row_terms_.assign(static_cast<size_t>(groups() * blocks * kInt8GroupRows), 0);
    for (int64_t g = 0; g < groups(); ++g) {
      const int64_t r0 = g * kInt8GroupRows, valid = std::min(kInt8GroupRows, rows - r0);
      const int8_t* src[kInt8GroupRows];
      for (int64_t i = 0; i < valid; ++i) src[i] = weight.data() + (r0 + i) * cols;
      pack_group(g, src, nullptr, valid);
      for (int64_t i = 0; i < valid; ++i) {
        const int64_t r = r0 + i;
        const int32_t off = static_cast<int32_t>(offset_[r]);
        offsets_[r] = 128 + off;
        scales_[g * kInt8GroupRows + i] = scale_[r];
        if (zero == 0) continue;
        for (int64_t b = 0; b < blocks; ++b) {
          int32_t sum = 0;
          for (int64_t c = b * layout_.block; c < (b + 1) * layout_.block; ++c) sum += weight[r * cols + c] - off;
          row_terms_[(g * blocks + b) * kInt8GroupRows + i] = zero * sum;
        }
      }
    }
    finish();
  }

  void prepare(const float* x, int64_t m, PreparedActivations& a) const override {
    if (input_) return prepare_int8_static(x, m, cols(), input_->scale, input_->offset, a);
    prepare_int8(x, m, cols(), cols(), ActivationForm::Int8PerToken, a);
  }
  // As dequant_w8a8: (q − offset) · scale.
  void decode_rows(int64_t r0, int64_t r1, float* out) const override {
    const int64_t k = cols();
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < k; ++c) out[(r - r0) * k + c] = (static_cast<float>(code(r, c)) - offset_[r]) * scale_[r];
    }
  }
  std::string kernel_name() const override { return std::string(input_ ? "w8a8-static/" : "w8a8/") + tier(); }

 private:
  std::vector<float> scale_, offset_;
  std::optional<W8A8StaticInput> input_;
};

}  // namespace

std::unique_ptr<WeightMatrix> make_w4a8_matrix(std::span<const int8_t> weight, bool packed_along_n, std::vector<float> scale,
                                               std::vector<float> scale_second, int64_t group_size, int64_t rows,
                                               int64_t cols, CpuIsa isa) {
  return std::make_unique<W4a8Matrix>(weight, packed_along_n, std::move(scale), std::move(scale_second), group_size, rows,
                                      cols, isa);
}

std::unique_ptr<WeightMatrix> make_w8a8_matrix(std::span<const int8_t> weight, std::vector<float> scale,
                                               std::vector<float> offset, std::optional<W8A8StaticInput> static_input,
                                               int64_t rows, int64_t cols, CpuIsa isa) {
  return std::make_unique<W8a8Matrix>(weight, std::move(scale), std::move(offset), static_input, rows, cols, isa);
}

}  // namespace k3::cpu
