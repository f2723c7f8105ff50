#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/numeric.h"
#include "quant/formats/ggml/ggml_dequant.h"
#include "quant/formats/ggml/ggml_quantize.h"

namespace k3 {
namespace {

std::vector<float> roundtrip(GgmlType type, const std::vector<float>& x) {
  const auto bytes = quantize_tensor(type, x, x.size());
  EXPECT_EQ(bytes.size(), ggml_row_size(type, x.size()));
  std::vector<float> y(x.size());
  dequantize_row(type, bytes.data(), y.data(), static_cast<int64_t>(y.size()));
  return y;
}

double relative_rms(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    ref += double(want[i]) * want[i];
  }
  return std::sqrt(err / ref);
}

std::vector<float> gaussian(size_t n, uint32_t seed, float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(offset, 0.02f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Relative RMS error of each type on Gaussian weights: sane and ordered by bit width. The bounds
// are ~1.3x what these quantizers reach (measured: 0.0054, 0.019, 0.076, 0.043, 0.088, 0.15, 0.28), so a broken scale or bit layout fails.
TEST(GgmlQuantize, ErrorIsWithinTheTypesResolution) {
  const auto x = gaussian(4096, 1);
  const std::pair<GgmlType, double> cases[] = {
      {GgmlType::Q8_0, 0.007}, {GgmlType::Q6_K, 0.025}, {GgmlType::Q4_K, 0.1}, {GgmlType::Q5_0, 0.056}, {GgmlType::Q4_0, 0.115},
      {GgmlType::Q3_K, 0.2},   {GgmlType::Q2_K, 0.37},
  };
  for (const auto& [type, bound] : cases) {
    const double e = relative_rms(roundtrip(type, x), x);
    EXPECT_LT(e, bound) << ggml_type_name(type);
    EXPECT_GT(e, 0.0) << ggml_type_name(type);
  }
}

// Affine K-quants must handle all-positive blocks (min > 0 clamps to 0) and all-negative ones.
TEST(GgmlQuantize, OneSidedBlocks) {
  for (float offset : {0.05f, -0.05f}) {
    const auto x = gaussian(1024, 2, offset);
    for (GgmlType type : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0}) {
      EXPECT_LT(relative_rms(roundtrip(type, x), x), 0.2) << ggml_type_name(type) << " offset " << offset;
    }
  }
}

TEST(GgmlQuantize, ZerosStayZero) {
  const std::vector<float> x(512, 0.0f);
  for (GgmlType type : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0}) {
    for (float y : roundtrip(type, x)) ASSERT_EQ(y, 0.0f) << ggml_type_name(type);
  }
}

// Values on the Q8_0 grid of an fp16-exact scale come back exactly.
TEST(GgmlQuantize, Q8_0GridIsExact) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = (i - 16) * 0.25f;
  x[31] = 127 * 0.25f;  // absmax sets d = 0.25
  EXPECT_EQ(roundtrip(GgmlType::Q8_0, x), x);
}

// Q4_0: the signed absmax maps to -8 and values on the grid d·(q-8) are exact.
TEST(GgmlQuantize, Q4_0GridIsExact) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>((i % 16) - 8) * -0.5f;  // absmax 4 at q = 0
  EXPECT_EQ(roundtrip(GgmlType::Q4_0, x), x);
}

// Q5_0 (llama.cpp's Q4_K fallback for rows that do not tile 256): the signed absmax maps to -16,
// the other values on the grid d·(q-16) are exact, and the 5th bits land in qh.
TEST(GgmlQuantize, Q5_0GridIsExact) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>((i % 32) - 16) * -0.25f;  // absmax 4 at q = 0
  EXPECT_EQ(roundtrip(GgmlType::Q5_0, x), x);
}

TEST(GgmlQuantize, FloatTypesEncodeRoundToNearestEven) {
  const std::vector<float> x = {1.0f, -2.5f, 1.0009765625f, 3.14159265f};
  const auto h = roundtrip(GgmlType::F16, x);
  const auto b = roundtrip(GgmlType::BF16, x);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i], decode_f16(encode_f16(x[i])));
    EXPECT_EQ(b[i], decode_bf16(encode_bf16(x[i])));
  }
  EXPECT_EQ(roundtrip(GgmlType::F32, x), x);
}

TEST(GgmlQuantize, RejectsPartialBlocksAndUnsupportedTypes) {
  std::vector<float> x(100, 1.0f);
  std::vector<uint8_t> out(1024);
  EXPECT_THROW(quantize_row(GgmlType::Q4_K, x.data(), out.data(), 100), Error);
  EXPECT_THROW(quantize_row(GgmlType::IQ2_XXS, x.data(), out.data(), 256), Error);
  EXPECT_FALSE(ggml_has_quantize(GgmlType::Q5_K));
}

}  // namespace
}  // namespace k3
