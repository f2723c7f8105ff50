// The absorb / un-absorb products over a split GGUF kv_b in its GGML blocks (mla_absorb_ggml.cu) on
// fresh random inputs (the seed is printed; K3_TEST_SEED replays one): k_b [H, 512, 128] and v_b
// [H, 128, 512] quantised by k3's own GGML quantiser (Q4_0 / Q2_K as the ExpertPack checkpoints store
// them, and Q8_0 / Q4_K for the generic path), against float64 over the exact CPU dequantisation
// (quant/formats/ggml) with the GPU's own inputs. Bound per output: 1e-5 · Σ|w·x| (fp32 accumulation of 128
// or 512 products, warp-sum order) plus 2^-8·|ref| when the output is bf16; q_pe must be copied
// exactly. Bad shapes are one-line errors. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/attention/mla/mla.h"
#include "quant/formats/ggml/cuda/mla_absorb_ggml.h"
#include "quant/formats/ggml/cuda/moe_ggml.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"
#include "quant/formats/ggml/ggml_dequant.h"
#include "quant/formats/ggml/ggml_quantize.h"

namespace k3::cuda {
namespace {

struct SplitBank {
  MoeGgmlBank bank;
  std::vector<float> w;  // the exact dequantisation, [H·N, K]
};

SplitBank make_bank(test::Rng& rng, GgmlType type, int64_t heads, int64_t n, int64_t k) {
  const std::vector<float> x = rng.normal(static_cast<size_t>(heads * n * k), 0.05f);
  const std::vector<uint8_t> bytes = quantize_tensor(type, x, static_cast<uint64_t>(k));
  SplitBank s;
  s.bank = moe_ggml_alloc(test::arena(), type, heads, n, k, "split kv_b bank");
  moe_ggml_upload_rows(s.bank, 0, bytes.data(), heads * n);
  s.w.resize(x.size());
  dequantize_row(type, bytes.data(), s.w.data(), heads * n * k);
  return s;
}

// The values the kernel reads: x rounded to the device dtype.
std::vector<float> as_device(std::vector<float> x, DType dtype) { return dtype == DType::kBF16 ? test::round_bf16(std::move(x)) : x; }

void expect_close(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& mag, bool bf16_out,
                  const std::string& what) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 1e-5 * mag[i] + (bf16_out ? std::ldexp(std::fabs(ref[i]), -8) : 0.0) + 1e-30;
    if (!(std::fabs(got[i] - ref[i]) <= tol) && ++bad <= 5) {
      ADD_FAILURE() << what << " element " << i << ": " << got[i] << " vs " << ref[i] << " (tolerance " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

class MlaGgmlTest : public ::testing::TestWithParam<std::pair<GgmlType, GgmlType>> {};

TEST_P(MlaGgmlTest, AbsorbAndUnabsorbMatchFloat64OverExactDequant) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const auto [k_type, v_type] = GetParam();
  const int64_t H = 3;
  const SplitBank kb = make_bank(rng, k_type, H, kMlaRank, kMlaNope);
  const SplitBank vb = make_bank(rng, v_type, H, kMlaV, kMlaRank);
  Arena& a = test::arena();
  for (int64_t B : {1, 2, 9}) {
    for (DType qt : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE("B " + std::to_string(B) + (qt == DType::kBF16 ? " bf16 q" : " f32 q"));
      // absorb
      const std::vector<float> q = as_device(rng.normal(static_cast<size_t>(B * H * kMlaQk)), qt);
      const DeviceTensor dq = upload_f32(a, q.data(), B, H * kMlaQk, qt, "q");
      const DeviceTensor q_abs = a.alloc_tensor(DType::kBF16, B, H * kMlaRow, "q_abs");
      poison(q_abs);
      mla_absorb_q_ggml(dq, kb.bank, q_abs, nullptr);
      std::vector<double> ref(static_cast<size_t>(B * H * kMlaRow)), mag(ref.size());
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < H; ++h) {
          const float* qh = &q[static_cast<size_t>(b * H * kMlaQk + h * kMlaQk)];
          const size_t o = static_cast<size_t>(b * H * kMlaRow + h * kMlaRow);
          for (int64_t c = 0; c < kMlaRank; ++c) {
            const float* w = &kb.w[static_cast<size_t>((h * kMlaRank + c) * kMlaNope)];
            for (int64_t d = 0; d < kMlaNope; ++d) {
              ref[o + c] += static_cast<double>(w[d]) * qh[d];
              mag[o + c] += std::fabs(static_cast<double>(w[d]) * qh[d]);
            }
          }
          for (int64_t e = 0; e < kMlaRope; ++e) ref[o + kMlaRank + e] = test::round_bf16(qh[kMlaNope + e]);
        }
      }
      expect_close(download_f32(q_abs), ref, mag, true, "q_abs");

      // un-absorb, with and without the gate, f32 and bf16 out
      const std::vector<float> lat = rng.normal(static_cast<size_t>(B * H * kMlaRank));
      const DeviceTensor dlat = upload_f32(a, lat.data(), B, H * kMlaRank, DType::kF32, "o_lat");
      const std::vector<float> g = as_device(rng.normal(static_cast<size_t>(B * H * kMlaV)), qt);
      const DeviceTensor dg = upload_f32(a, g.data(), B, H * kMlaV, qt, "gate");
      for (bool gated : {false, true}) {
        for (DType ot : {DType::kF32, DType::kBF16}) {
          const DeviceTensor out = a.alloc_tensor(ot, B, H * kMlaV, "out");
          poison(out);
          mla_unabsorb_o_ggml(dlat, vb.bank, gated ? dg : DeviceTensor{}, out, nullptr);
          std::vector<double> r(static_cast<size_t>(B * H * kMlaV)), m(r.size());
          for (int64_t b = 0; b < B; ++b) {
            for (int64_t h = 0; h < H; ++h) {
              for (int64_t j = 0; j < kMlaV; ++j) {
                const size_t o = static_cast<size_t>(b * H * kMlaV + h * kMlaV + j);
                const float* w = &vb.w[static_cast<size_t>((h * kMlaV + j) * kMlaRank)];
                const float* x = &lat[static_cast<size_t>(b * H * kMlaRank + h * kMlaRank)];
                for (int64_t c = 0; c < kMlaRank; ++c) {
                  r[o] += static_cast<double>(w[c]) * x[c];
                  m[o] += std::fabs(static_cast<double>(w[c]) * x[c]);
                }
                if (gated) {
                  const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(g[o])));
                  r[o] *= s, m[o] = m[o] * s + 1e-6 * std::fabs(r[o]);  // + the f32 sigmoid
                }
              }
            }
          }
          expect_close(download_f32(out), r, m, ot == DType::kBF16,
                       std::string("out") + (gated ? " gated" : "") + (ot == DType::kBF16 ? " bf16" : " f32"));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MlaGgmlTest,
                         ::testing::Values(std::pair{GgmlType::Q4_0, GgmlType::Q2_K},   // the ExpertPack split
                                           std::pair{GgmlType::Q8_0, GgmlType::Q4_K}),  // any supported type
                         [](const auto& info) {
                           return std::string(ggml_type_name(info.param.first)) + "_" + std::string(ggml_type_name(info.param.second));
                         });

TEST(MlaGgml, WrongBankShapesAreOneLineErrors) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  Arena& a = test::arena();
  const SplitBank kb = make_bank(rng, GgmlType::Q4_0, 2, kMlaRank, kMlaNope);
  const DeviceTensor q = a.alloc_tensor(DType::kF32, 1, 3 * kMlaQk, "q");  // 3 heads, bank has 2
  const DeviceTensor q_abs = a.alloc_tensor(DType::kBF16, 1, 3 * kMlaRow, "q_abs");
  try {
    mla_absorb_q_ggml(q, kb.bank, q_abs, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("mla_absorb_q_ggml k_b: expects [3, 512, 128] GGML blocks, got [2, 512, 128]"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  const DeviceTensor lat = a.alloc_tensor(DType::kF32, 1, 2 * kMlaRank, "o_lat");
  const DeviceTensor out = a.alloc_tensor(DType::kF32, 1, 2 * kMlaV, "out");
  EXPECT_THROW(mla_unabsorb_o_ggml(lat, kb.bank, DeviceTensor{}, out, nullptr), Error);  // k_b is not [H, 128, 512]
}

}  // namespace
}  // namespace k3::cuda
