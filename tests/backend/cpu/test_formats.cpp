// Fast CPU weight formats (dense, FP8, NVFP4, MXFP4) on every CPU tier this host runs: exact
// decode against the scheme references, fused and tile kernels against float64.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "backend/cpu/kernels/float_matrix.h"
#include "core/error.h"
#include "core/numeric.h"
#include "kernel_test_util.h"
#include "quant/formats/fp8/cpu/fp8_matrix.h"
#include "quant/formats/fp8/fp8.h"
#include "quant/formats/mxfp4/cpu/mxfp4_matrix.h"
#include "quant/formats/mxfp4/mxfp4.h"
#include "quant/formats/nvfp4/cpu/nvfp4_matrix.h"
#include "quant/formats/nvfp4/nvfp4.h"

namespace k3::cpu {
namespace {

using testing::expect_driver_matches;
using testing::expect_matches_float64;
using testing::random_floats;
using testing::tier_name;

class FormatTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(FormatTest, Bf16AndF16MatchFloat64) {
  const int64_t n = 37, k = 300;
  const std::vector<float> w = random_floats(n * k, 1);
  std::vector<uint16_t> bf(n * k), f16(n * k);
  for (int64_t i = 0; i < n * k; ++i) bf[i] = encode_bf16(w[i]), f16[i] = encode_f16(w[i]);
  const auto bytes = [](const std::vector<uint16_t>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 2);
  };
  for (bool is_bf16 : {true, false}) {
    auto m = make_half_matrix(bytes(is_bf16 ? bf : f16), is_bf16, n, k, nullptr, GetParam());
    std::vector<float> decoded(n * k);
    m->decode_rows(0, n, decoded.data());
    for (int64_t i = 0; i < n * k; ++i) ASSERT_EQ(decoded[i], is_bf16 ? decode_bf16(bf[i]) : decode_f16(f16[i]));
    for (int64_t tokens : {1, 3}) expect_matches_float64(*m, random_floats(tokens * k, 2 + tokens), tokens);
    expect_driver_matches(make_half_matrix(bytes(is_bf16 ? bf : f16), is_bf16, n, k, nullptr, GetParam()), 9);
  }
}

TEST_P(FormatTest, Fp8BlockAndTensorMatchReference) {
  const int64_t n = 200, k = 320;
  const std::vector<float> w = random_floats(n * k, 3, 0.05f);
  for (auto [bn, bk] : {std::pair<int64_t, int64_t>{128, 128}, {n, k}}) {
    std::vector<uint8_t> q(n * k);
    std::vector<float> scale(((n + bn - 1) / bn) * ((k + bk - 1) / bk));
    quantize_fp8_block(w.data(), n, k, bn, bk, q.data(), scale.data());
    std::vector<float> want(n * k), got(n * k);
    dequant_fp8_block(q.data(), scale.data(), n, k, bn, bk, want.data());
    auto m = make_fp8_matrix(q, scale, bn, bk, n, k, nullptr, GetParam());
    m->decode_rows(0, n, got.data());
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
    for (int64_t tokens : {1, 4}) expect_matches_float64(*m, random_floats(tokens * k, 4 + tokens), tokens);
    expect_driver_matches(make_fp8_matrix(q, scale, bn, bk, n, k, nullptr, GetParam()), 10);
  }
}

// The FP8 activation contract: the kernel multiplies the prepared values exactly (float64 check),
// and those are e4m3 roundings of x — within half an e4m3 step (2^-4 relative) of each value, the
// block maximum kept — per token and 1×128 block, or with the static input_scale (saturating at
// 448·s).
TEST_P(FormatTest, Fp8ActivationContract) {
  const int64_t n = 64, k = 320;
  const std::vector<float> w = random_floats(n * k, 5, 0.05f);
  std::vector<uint8_t> q(n * k);
  std::vector<float> scale(((n + 127) / 128) * ((k + 127) / 128));
  quantize_fp8_block(w.data(), n, k, 128, 128, q.data(), scale.data());
  const std::vector<float> x = random_floats(3 * k, 6);
  for (const float input_scale : {0.0f, 0.004f}) {
    const auto m = make_fp8_matrix(q, scale, 128, 128, n, k, nullptr, GetParam(), Fp8Options{true, input_scale});
    EXPECT_EQ(m->kernel_name().rfind("fp8-a8/", 0), 0u);
    for (int64_t tokens : {1, 3}) expect_matches_float64(*m, x, tokens);
    PreparedActivations a;
    m->prepare(x.data(), 3, a);
    std::vector<float> v(static_cast<size_t>(k));
    int changed = 0;
    for (int64_t t = 0; t < 3; ++t) {
      a.values(t, v.data());
      for (int64_t b = 0; b * 128 < k; ++b) {
        const int64_t i0 = b * 128, i1 = std::min(k, (b + 1) * 128);
        float amax = 0, vmax = 0;
        for (int64_t i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(x[t * k + i]));
        // The block's scale, and half the smallest (subnormal) e4m3 step in value units.
        const float s = input_scale > 0 ? input_scale : amax / 448.0f, subnormal = std::ldexp(s, -10);
        for (int64_t i = i0; i < i1; ++i) {
          const float xi = x[t * k + i];
          if (std::fabs(xi) <= 448.0f * s) {
            EXPECT_LE(std::fabs(v[i] - xi), std::ldexp(std::fabs(xi), -4) + subnormal) << i;
          } else {
            EXPECT_EQ(std::fabs(v[i]), 448.0f * s) << i;  // static scale: saturated
          }
          changed += v[i] != xi;
          vmax = std::max(vmax, std::fabs(v[i]));
        }
        if (input_scale == 0) {
          EXPECT_NEAR(vmax, amax, amax * 1e-6f) << "block max of token " << t;
        }
      }
    }
    EXPECT_GT(changed, 3 * k / 2);
    expect_driver_matches(make_fp8_matrix(q, scale, 128, 128, n, k, nullptr, GetParam(), Fp8Options{true, input_scale}), 11);
  }
}

struct Fp4Case {
  bool nvfp4;
  int64_t n, k;
};

TEST_P(FormatTest, Fp4DecodeIsTheReferenceAndKernelsMatchFloat64) {
  for (const Fp4Case c : {Fp4Case{true, 40, 256}, Fp4Case{true, 16, 1024}, Fp4Case{false, 53, 512}}) {
    const std::vector<float> w = random_floats(c.n * c.k, 5, 0.02f);
    std::vector<uint8_t> packed(c.n * c.k / 2), scales(c.n * c.k / (c.nvfp4 ? 16 : 32));
    std::vector<float> want(c.n * c.k), got(c.n * c.k);
    const float global = 0.37f;  // a non-unit weight_scale_2
    if (c.nvfp4) {
      quantize_nvfp4(w.data(), c.n, c.k, global, packed.data(), scales.data());
      dequant_nvfp4(packed.data(), scales.data(), global, c.n, c.k, want.data());
    } else {
      quantize_mxfp4(w.data(), c.n, c.k, packed.data(), scales.data());
      dequant_mxfp4(packed.data(), scales.data(), c.n, c.k, want.data());
    }
    const auto make = [&] {
      return c.nvfp4 ? make_nvfp4_matrix(packed, scales, global, c.n, c.k, GetParam())
                     : make_mxfp4_matrix(packed, scales, c.n, c.k, GetParam());
    };
    auto m = make();
    m->decode_rows(0, c.n, got.data());
    for (int64_t i = 0; i < c.n * c.k; ++i) ASSERT_EQ(got[i] * m->output_scale(), want[i]) << i;
    for (int64_t tokens : {1, 2, 4, 6}) expect_matches_float64(*m, random_floats(tokens * c.k, 6 + tokens), tokens);
    expect_driver_matches(make(), 11);
  }
}

TEST_P(FormatTest, Nvfp4W4A4ContractQuantisesActivationsWithInputScale) {
  const int64_t n = 32, k = 128;
  const float global = 0.5f, input_scale = 0.0123f;
  const std::vector<float> w = random_floats(n * k, 7, 0.02f);
  std::vector<uint8_t> packed(n * k / 2), scales(n * k / 16);
  quantize_nvfp4(w.data(), n, k, global, packed.data(), scales.data());
  Nvfp4Options contract{true, input_scale};
  auto m = make_nvfp4_matrix(packed, scales, global, n, k, GetParam(), contract);
  EXPECT_FLOAT_EQ(m->output_scale(), global * input_scale);
  const std::vector<float> x = random_floats(k, 8);
  PreparedActivations a;
  m->prepare(x.data(), 1, a);
  std::vector<float> xv(k);
  a.values(0, xv.data());
  // Spec §2.3: per 16, sf = e4m3(amax/6 · 1/input_scale), code = e2m1(x/input_scale/sf); the
  // kernel holds code·sf exactly (input_scale joins the output scale).
  for (int64_t b = 0; b < k; b += 16) {
    float amax = 0;
    for (int64_t i = b; i < b + 16; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float sf = decode_e4m3fn(encode_e4m3fn_sat(amax / 6.0f / input_scale));
    for (int64_t i = b; i < b + 16; ++i) {
      ASSERT_EQ(xv[i], decode_e2m1(encode_e2m1(x[i] / input_scale / sf)) * sf) << i;
      ASSERT_NEAR(xv[i] * input_scale, x[i], std::fabs(x[i]) * 0.25 + amax * 0.1);
    }
  }
  expect_matches_float64(*m, x, 1);
  expect_driver_matches(make_nvfp4_matrix(packed, scales, global, n, k, GetParam(), contract), 12);
}

INSTANTIATE_TEST_SUITE_P(Tiers, FormatTest, ::testing::ValuesIn(runnable_isas()), tier_name);

TEST(FormatErrors, WrongSizesAreOneLineErrors) {
  std::vector<uint8_t> bytes(100);
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { make_half_matrix(bytes, true, 10, 10, nullptr, CpuIsa::Scalar); }).find("bf16 weight"), std::string::npos);
  EXPECT_NE(message([&] { make_fp8_matrix(bytes, {1.0f, 1.0f}, 128, 128, 10, 10, nullptr, CpuIsa::Scalar); }).find("weight_scale"),
            std::string::npos);
  EXPECT_NE(message([&] { make_nvfp4_matrix(bytes, bytes, 1.0f, 10, 24, CpuIsa::Scalar); }).find("multiple of the block"),
            std::string::npos);
  EXPECT_NE(message([&] { make_mxfp4_matrix(bytes, bytes, 10, 32, CpuIsa::Scalar); }).find("packed size"),
            std::string::npos);
}

TEST(Fixed16Activations, KeepSixteenBitsPerBlockAndZeroBlocks) {
  std::vector<float> x = random_floats(64, 13);
  for (int i = 32; i < 64; ++i) x[i] = 0.0f;
  x[3] = 1e-9f;  // far below its block's largest value: rounds to 0
  PreparedActivations a;
  prepare_fixed16(x.data(), 1, 64, 32, a);
  std::vector<float> v(64);
  a.values(0, v.data());
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  for (int i = 0; i < 32; ++i) ASSERT_LE(std::fabs(v[i] - x[i]), amax * std::ldexp(1.0f, -15)) << i;  // half a step, step ≤ amax·2^-14
  EXPECT_EQ(v[3], 0.0f);
  int16_t largest = 0;
  for (int i = 0; i < 32; ++i) largest = std::max<int16_t>(largest, static_cast<int16_t>(std::abs(a.q16[i])));
  EXPECT_GE(largest, 16384);  // the block uses its 16 bits
  EXPECT_EQ(a.scale[1], 0.0f);
  for (int i = 32; i < 64; ++i) EXPECT_EQ(v[i], 0.0f);
}

TEST(CpuIsaSelection, EnvironmentCapsTheTierAndRejectsUnknownNames) {
  ::setenv("K3_CPU_ISA", "scalar", 1);
  EXPECT_EQ(selected_isa(), CpuIsa::Scalar);
  ::setenv("K3_CPU_ISA", "sse9", 1);
  EXPECT_THROW(selected_isa(), Error);
  ::unsetenv("K3_CPU_ISA");
  EXPECT_EQ(selected_isa(), host_isa());
}

}  // namespace
}  // namespace k3::cpu
