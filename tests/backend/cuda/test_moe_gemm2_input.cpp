// GEMM 2's input formed in one pass (the requantisation of GEMM 2's input after the activation): each
// moe_quantize_*_activation kernel applies the gated activation to GEMM 1's gate and up halves and
// quantises the result under its bank's activation contract. Its contract is the two kernels it
// replaces — gated_activation into bf16, then the quantisation of those rows — so the test asserts
// the outputs equal, bit for bit, on fresh random inputs (the seed is printed; K3_TEST_SEED replays
// one), for SiLU, SiTU and SiTU with the β_lin cap (alphas ≠ 1), gate and up as the column halves of
// one [R, 2K] buffer as the model has them; widths past one pass of each kernel's threads. The
// quantisations themselves are tested against the CPU contracts in test_moe_w4a8.cpp,
// test_moe_ggml.cpp and test_moe_nvfp4_act.cpp. Bad arguments: one-line errors. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/moe/moe.h"
#include "quant/formats/ggml/cuda/moe_ggml.h"
#include "quant/formats/nvfp4/cuda/moe_nvfp4_act.h"
#include "quant/formats/modelslim/cuda/moe_w4a8.h"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"

namespace k3::cuda {
namespace {

std::vector<GatedActivation> activations() {
  GatedActivation silu;
  silu.gate_alpha = 0.75f, silu.up_alpha = 1.5f;
  GatedActivation situ;
  situ.situ = true, situ.beta = 4.0f;
  GatedActivation capped = situ;
  capped.beta_lin = 2.5f, capped.gate_alpha = 1.25f, capped.up_alpha = 0.5f;
  return {silu, situ, capped};
}

std::string describe(const GatedActivation& a) {
  return !a.situ ? "silu" : a.beta_lin > 0 ? "situ capped" : "situ";
}

// GEMM 1's output [R, 2K] (gate | up) of random values wide enough for SiTU's caps to bite, some rows
// all zero (a zero row's scale is 0), and the reference activation act(gate, up) in bf16.
struct Gemm1Output {
  DeviceTensor gate_up, gate, up;
};
Gemm1Output random_gemm1_output(test::Rng& rng, int64_t R, int64_t K) {
  std::vector<float> v = test::round_bf16(rng.normal(static_cast<size_t>(R * 2 * K), 3.0f));
  for (int64_t c = 0; c < 2 * K; ++c) v[static_cast<size_t>(2 * K + c)] = 0.0f;  // row 1: zeros
  Gemm1Output g;
  g.gate_up = upload_f32(test::arena(), v.data(), R, 2 * K, DType::kBF16, "gate|up");
  g.gate = g.gate_up.col_slice(0, K);
  g.up = g.gate_up.col_slice(K, K);
  return g;
}

DeviceTensor reference_activation(const GatedActivation& act, const Gemm1Output& g) {
  const DeviceTensor a = test::arena().alloc_tensor(DType::kBF16, g.gate.rows, g.gate.cols, "activation");
  gated_activation(act, g.gate, g.up, a, nullptr);
  return a;
}

std::vector<uint8_t> bytes_at(const void* p, size_t n) {
  return download_bytes(DeviceTensor(const_cast<void*>(p), DType::kU8, 1, static_cast<int64_t>(n)));
}

TEST(MoeGemm2Input, Int8RowsEqualTheActivationThenTheQuantisation) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Arena& a = test::arena();
  for (int64_t K : {int64_t{3072}, int64_t{8192 + 520}}) {  // one pass of registers; past kQuantHeld chunks
    const int64_t R = 19;
    const Gemm1Output g = random_gemm1_output(rng, R, K);
    for (const GatedActivation& act : activations()) {
      SCOPED_TRACE(describe(act) + ", K " + std::to_string(K));
      const Int8Rows want{a.alloc_tensor(DType::kU8, R, K, "want"), a.alloc_n<float>(static_cast<size_t>(R), "want s")};
      const Int8Rows got{a.alloc_tensor(DType::kU8, R, K, "got"), a.alloc_n<float>(static_cast<size_t>(R), "got s")};
      poison(got.codes);
      moe_quantize_int8_rows(reference_activation(act, g), want, nullptr);
      moe_quantize_int8_activation(act, g.gate, g.up, got, nullptr);
      EXPECT_EQ(download_bytes(got.codes), download_bytes(want.codes)) << "codes";
      EXPECT_EQ(bytes_at(got.scale, static_cast<size_t>(R) * 4), bytes_at(want.scale, static_cast<size_t>(R) * 4)) << "row scales";
      EXPECT_EQ(bytes_at(got.scale + 1, 4), std::vector<uint8_t>(4, 0)) << "an all-zero row has scale 0";
    }
  }
}

TEST(MoeGemm2Input, GgmlBlocksEqualTheActivationThenTheQuantisation) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Arena& a = test::arena();
  const int64_t R = 21, K = 3072 + 256;  // past one CTA's 2048 values per row
  const Gemm1Output g = random_gemm1_output(rng, R, K);
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_K}) {  // activation blocks of 32 and of 256
    for (const GatedActivation& act : activations()) {
      SCOPED_TRACE(std::string(ggml_type_name(type)) + ", " + describe(act));
      const size_t n = moe_ggml_acts_bytes(type, R, K);
      const MoeGgmlActs want = moe_ggml_acts_view(a.alloc(n, "want"), type, R, K);
      void* got_buffer = a.alloc(n, "got");
      const MoeGgmlActs got = moe_ggml_acts_view(got_buffer, type, R, K);
      poison(DeviceTensor(got_buffer, DType::kU8, 1, static_cast<int64_t>(n)));
      moe_ggml_quantize(reference_activation(act, g), want, nullptr);
      moe_ggml_quantize_activation(act, g.gate, g.up, got, nullptr);
      EXPECT_EQ(bytes_at(got.q, static_cast<size_t>(R * K)), bytes_at(want.q, static_cast<size_t>(R * K))) << "codes";
      EXPECT_EQ(bytes_at(got.scale, static_cast<size_t>(R * (K / got.block) * 4)),
                bytes_at(want.scale, static_cast<size_t>(R * (K / want.block) * 4))) << "scales";
      EXPECT_EQ(bytes_at(got.sums, static_cast<size_t>(R * (K / 16) * 2)), bytes_at(want.sums, static_cast<size_t>(R * (K / 16) * 2))) << "sums";
    }
  }
}

TEST(MoeGemm2Input, Nvfp4ValuesEqualTheActivationThenTheQuantisation) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  Arena& a = test::arena();
  const int64_t T = 23, k = 3, E = 7, K = 1024 + 48, R = T * k;
  std::vector<int32_t> ids(static_cast<size_t>(R));
  for (int64_t t = 0; t < T; ++t) {
    const int first = rng.uniform_int(0, static_cast<int>(E) - 1);
    for (int64_t j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = static_cast<int32_t>((first + 2 * j) % E);
  }
  const DeviceTensor dids = a.alloc_tensor(DType::kI32, T, k, "ids");
  copy_bytes_to_device(dids.data, ids.data(), ids.size() * sizeof(int32_t));
  const MoeDispatch d = moe_dispatch_view(a.alloc(moe_dispatch_bytes(T, k, E), "dispatch"), T, k, E);
  moe_dispatch(dids, d, nullptr);
  const std::vector<float> scales = rng.uniform(static_cast<size_t>(E), 0.01f, 2.0f);
  const DeviceTensor dscales = upload_f32(a, scales.data(), 1, E, DType::kF32, "input scales");
  const Gemm1Output g = random_gemm1_output(rng, R, K);
  for (const GatedActivation& act : activations()) {
    SCOPED_TRACE(describe(act));
    const DeviceTensor want = a.alloc_tensor(DType::kBF16, R, K, "want");
    const DeviceTensor got = a.alloc_tensor(DType::kBF16, R, K, "got");
    poison(got);
    moe_quantize_nvfp4_rows(reference_activation(act, g), dscales.as<const float>(), d, want, nullptr);
    moe_quantize_nvfp4_activation(act, g.gate, g.up, dscales.as<const float>(), d, got, nullptr);
    EXPECT_EQ(download_bytes(got), download_bytes(want));
  }
}

// One line naming the entry and what is wrong.
template <class F>
void expect_one_line_error(F&& f, const std::string& want) {
  try {
    f();
    ADD_FAILURE() << "no error, wanted: " << want;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(want), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(MoeGemm2Input, BadArgumentsAreOneLineErrors) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  Arena& a = test::arena();
  const int64_t R = 4, K = 256;
  const DeviceTensor gu = a.alloc_tensor(DType::kBF16, R, 2 * K, "gate|up");
  const DeviceTensor gate = gu.col_slice(0, K), up = gu.col_slice(K, K);
  const DeviceTensor gu32 = a.alloc_tensor(DType::kF32, R, 2 * K, "gate|up f32");
  GatedActivation situ;
  situ.situ = true, situ.beta = 0.0f;
  const GatedActivation silu;
  const Int8Rows q{a.alloc_tensor(DType::kU8, R, K, "codes"), a.alloc_n<float>(static_cast<size_t>(R), "scales")};
  expect_one_line_error([&] { moe_quantize_int8_activation(silu, gu32.col_slice(0, K), gu32.col_slice(K, K), q, nullptr); },
                        "moe_quantize_int8_activation gate");
  expect_one_line_error([&] { moe_quantize_int8_activation(silu, gate, up.col_slice(0, 128), q, nullptr); },
                        "moe_quantize_int8_activation up");
  expect_one_line_error([&] { moe_quantize_int8_activation(situ, gate, up, q, nullptr); },
                        "moe_quantize_int8_activation: SiTU beta must be > 0");
  const Int8Rows short_q{a.alloc_tensor(DType::kU8, R - 1, K, "codes"), q.scale};
  expect_one_line_error([&] { moe_quantize_int8_activation(silu, gate, up, short_q, nullptr); },
                        "moe_quantize_int8_activation codes");

  const MoeGgmlActs acts =
      moe_ggml_acts_view(a.alloc(moe_ggml_acts_bytes(GgmlType::Q4_K, R, 2 * K), "acts"), GgmlType::Q4_K, R, 2 * K);
  expect_one_line_error([&] { moe_ggml_quantize_activation(silu, gate, up, acts, nullptr); },
                        "moe_ggml_quantize_activation input");

  const MoeDispatch d = moe_dispatch_view(a.alloc(moe_dispatch_bytes(2, 2, 4), "dispatch"), 2, 2, 4);
  const float* scales = a.alloc_n<float>(4, "input scales");
  const DeviceTensor out = a.alloc_tensor(DType::kBF16, R, K, "out");
  expect_one_line_error([&] { moe_quantize_nvfp4_activation(silu, gate, up, nullptr, d, out, nullptr); },
                        "moe_quantize_nvfp4_activation: no input scales");
  const DeviceTensor out32 = a.alloc_tensor(DType::kF32, R, K, "out f32");
  expect_one_line_error([&] { moe_quantize_nvfp4_activation(silu, gate, up, scales, d, out32, nullptr); },
                        "moe_quantize_nvfp4_activation out");
}

}  // namespace
}  // namespace k3::cuda
