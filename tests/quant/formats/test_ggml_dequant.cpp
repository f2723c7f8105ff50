// GGML type table and dequantizer unit tests (the bit-exact comparison with ggml-made data is in
// tests/io/test_gguf.cpp, which reads the fixture GGUF).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "quant/formats/ggml/ggml_dequant.h"
#include "io/ggml_types.h"

namespace k3 {
namespace {

uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }

TEST(GgmlTypes, SizesAndRowBytes) {
  struct Row {
    uint32_t id;
    const char* name;
    uint32_t block, bytes;
  };
  const Row want[] = {
      {0, "f32", 1, 4},         {1, "f16", 1, 2},        {2, "q4_0", 32, 18},     {3, "q4_1", 32, 20},
      {6, "q5_0", 32, 22},      {7, "q5_1", 32, 24},     {8, "q8_0", 32, 34},     {9, "q8_1", 32, 36},
      {10, "q2_K", 256, 84},    {11, "q3_K", 256, 110},  {12, "q4_K", 256, 144},  {13, "q5_K", 256, 176},
      {14, "q6_K", 256, 210},   {15, "q8_K", 256, 292},  {16, "iq2_xxs", 256, 66}, {17, "iq2_xs", 256, 74},
      {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},  {20, "iq4_nl", 32, 18},  {21, "iq3_s", 256, 110},
      {22, "iq2_s", 256, 82},   {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},       {25, "i16", 1, 2},
      {26, "i32", 1, 4},        {27, "i64", 1, 8},       {28, "f64", 1, 8},       {29, "iq1_m", 256, 56},
      {30, "bf16", 1, 2},       {34, "tq1_0", 256, 54},  {35, "tq2_0", 256, 66},  {39, "mxfp4", 32, 17},
  };
  ASSERT_EQ(ggml_types().size(), std::size(want));
  for (const Row& r : want) {
    const GgmlTypeInfo& info = ggml_type_info(r.id);
    EXPECT_EQ(info.name, r.name);
    EXPECT_EQ(info.block_size, r.block) << r.name;
    EXPECT_EQ(info.type_size, r.bytes) << r.name;
    EXPECT_EQ(find_ggml_type(r.name), &info);
  }
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 0xFFFFFFFFu}) {
    EXPECT_EQ(find_ggml_type(id), nullptr);
    try {
      ggml_type_info(id, Where{"f.gguf", "w", "type"});
      ADD_FAILURE() << id;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "f.gguf: tensor 'w': field 'type': unknown GGML type id " + std::to_string(id));
    }
  }
  EXPECT_EQ(ggml_row_size(GgmlType::Q4_K, 7168), 28u * 144);
  EXPECT_EQ(ggml_row_size(GgmlType::MXFP4, 64), 34u);
  EXPECT_EQ(ggml_row_size(GgmlType::F32, 3), 12u);
  EXPECT_THROW(ggml_row_size(GgmlType::Q4_K, 7000), Error);
  try {
    ggml_row_size(GgmlType::F64, UINT64_MAX);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "row of 18446744073709551615 elements of f64 overflows a 64-bit byte count");
  }
}

TEST(GgmlDequant, UnsupportedTypesAndBadCountsAreErrors) {
  const uint8_t block[292] = {};
  float out[256];
  for (GgmlType t : {GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::IQ2_XXS, GgmlType::TQ1_0, GgmlType::I32}) {
    EXPECT_FALSE(ggml_has_dequant(t));
    try {
      dequantize_row(t, block, out, 256);
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "no dequantizer for GGML type " + std::string(ggml_type_name(t)));
    }
  }
  try {
    dequantize_row(GgmlType::Q4_0, block, out, 48);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot dequantize 48 elements of q4_0: not a whole number of 32-element blocks");
  }
  try {
    dequantize_tensor(GgmlType::Q4_0, std::span<const uint8_t>(block, 35), out, 64);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot dequantize 64 elements of q4_0 from 35 bytes (needs 36)");
  }
}

// Half-precision decoding covers every code, on the vector and the portable path: exact values,
// signed zeros, inf, and NaNs keeping sign and payload, made quiet (as x86's vcvtph2ps, which ggml
// uses, does).
TEST(GgmlDequant, F16EveryCode) {
  std::vector<uint8_t> src(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) std::memcpy(&src[2 * h], &h, 2);
  std::vector<float> out(65536), one_by_one(65536);
  dequantize_row(GgmlType::F16, src.data(), out.data(), 65536);  // vector path where the CPU has one
  for (uint32_t h = 0; h < 65536; ++h) dequantize_row(GgmlType::F16, &src[2 * h], &one_by_one[h], 1);  // portable
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(f32_bits(one_by_one[h]), f32_bits(out[h])) << std::hex << h;
    const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 31, mant = h & 0x3FF;
    uint32_t want;
    if (exp == 31) {
      want = sign | 0x7F800000u | mant << 13 | (mant ? 0x00400000u : 0);
    } else {
      const double mag = exp == 0 ? std::ldexp(static_cast<double>(mant), -24)
                                  : std::ldexp(1.0 + mant / 1024.0, static_cast<int>(exp) - 15);
      want = sign | f32_bits(static_cast<float>(mag));
    }
    ASSERT_EQ(f32_bits(out[h]), want) << std::hex << h;
  }
}

// MXFP4 covers every E8M0 exponent (incl. the subnormal halves 0 and 1, and 255) and nibble.
TEST(GgmlDequant, Mxfp4EveryExponentAndCode) {
  const float doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  uint8_t block[17];
  float out[32];
  for (int e = 0; e < 256; ++e) {
    block[0] = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) block[1 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
    dequantize_row(GgmlType::MXFP4, block, out, 32);
    const float half_scale = static_cast<float>(std::ldexp(1.0, e - 128));
    for (int j = 0; j < 16; ++j) {
      ASSERT_EQ(f32_bits(out[j]), f32_bits(doubled[j] * half_scale)) << e << " " << j;
      ASSERT_EQ(f32_bits(out[j + 16]), f32_bits(doubled[15 - j] * half_scale)) << e << " " << j;
    }
  }
}

// Q5_0/Q5_1 (no fixture tensor for Q5_1): pack chosen 5-bit codes by the layout definition
// (low nibbles: qs[j] holds codes j and j+16; bit j of the u32 qh holds the 5th bit of code j) and
// check every element.
TEST(GgmlDequant, Q5BitLayout) {
  uint8_t codes[32];
  for (int j = 0; j < 32; ++j) codes[j] = static_cast<uint8_t>((j * 13 + 7) % 32);
  uint8_t qs[16];
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((codes[j] & 15) | (codes[j + 16] & 15) << 4);
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>(codes[j] >> 4) << j;
  const uint16_t d = 0x3D55, m = 0xB800;  // 1.3330078125 and -0.5 as f16
  const float df = 0x1.554p+0f, mf = -0.5f;

  uint8_t q51[24];
  std::memcpy(q51, &d, 2);
  std::memcpy(q51 + 2, &m, 2);
  std::memcpy(q51 + 4, &qh, 4);
  std::memcpy(q51 + 8, qs, 16);
  uint8_t q50[22];
  std::memcpy(q50, &d, 2);
  std::memcpy(q50 + 2, &qh, 4);
  std::memcpy(q50 + 6, qs, 16);
  float out51[32], out50[32];
  dequantize_row(GgmlType::Q5_1, q51, out51, 32);
  dequantize_row(GgmlType::Q5_0, q50, out50, 32);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(f32_bits(out51[j]), f32_bits(static_cast<float>(codes[j]) * df + mf)) << j;
    EXPECT_EQ(f32_bits(out50[j]), f32_bits(static_cast<float>(codes[j] - 16) * df)) << j;
  }
}

// The threaded whole-tensor path equals the row path on a tensor of many chunks.
TEST(GgmlDequant, TensorPathMatchesRowPath) {
  const int64_t n = 256 * 1000 + 256;
  const GgmlTypeInfo& info = ggml_type_info(GgmlType::Q6_K);
  std::vector<uint8_t> packed(static_cast<size_t>(n / info.block_size * info.type_size));
  uint32_t x = 12345;
  for (auto& b : packed) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  for (size_t blk = 0; blk < packed.size(); blk += info.type_size) packed[blk + 209] = 0x1C;  // finite d
  std::vector<float> a(n), b(n);
  dequantize_row(GgmlType::Q6_K, packed.data(), a.data(), n);
  dequantize_tensor(GgmlType::Q6_K, packed, b.data(), n, 2);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

}  // namespace
}  // namespace k3

namespace k3 {
namespace {

// An empty tensor (the fuzzer's find): no element, possibly null pointers, nothing touched.
TEST(GgmlDequantEmpty, ZeroElementsReadAndWriteNothing) {
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_K}) {
    EXPECT_NO_THROW(dequantize_row(type, nullptr, nullptr, 0));
  }
}

}  // namespace
}  // namespace k3
