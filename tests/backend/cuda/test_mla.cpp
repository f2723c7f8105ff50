// MLA kernels (prefill attention with the output gate, absorbed decode over a paged latent cache
// with split-K, the absorb / un-absorb products) against the CPU mixer cpu::mla_mixer
// (backend/cpu/mla.cpp). The layer's o_proj is the identity (hidden = H·128), so the mixer's output
// IS the gated attention output. The GPU gets the CPU's own intermediate values: q and the gate
// logits from the same cpu::linear calls, the latent cache rows straight from the CPU sequence
// state (fp32, rounded to bf16 on upload), kv_b(c) from cpu::linear. kv_b is drawn on the bf16 grid,
// so W_UK / W_UV are the same numbers on both sides. Fixed seeds (K3_TEST_SEED overrides).
//
// Tolerance, relative L2 over all outputs: 1e-2 [largest measured on the H200 with the fixed seeds,
// 2026-11-29: 3.9e-3 f32 out, 4.4e-3 bf16 out]. The GPU's operands are bf16 — q, kv_b(c) and the
// cache rows (expanded form), q_abs (absorbed form) and the softmax weights P, each within 2^-9
// relative — with fp32 accumulation and softmax; the outputs are convex combinations of values, so
// the relative error stays at a few 2^-9 (≈ 0.4 %), plus 2^-8 allowed when the output is bf16.
#include <gtest/gtest.h>

#include <deque>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/core/device.h"
#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"

namespace k3::cuda {
namespace {

constexpr double kTol = 1e-2;

struct MlaLayer {
  K3Config cfg;
  MlaWeights w;
  int64_t H = 0, hidden = 0;
  std::vector<float> w_uk_rows, w_uv_rows;  // [H·128][512] each
  float scale = 0;
};

MlaLayer make_layer(int64_t H, test::Rng& g) {
  MlaLayer L;
  L.H = H, L.hidden = H * kMlaV;
  MlaConfig& m = L.cfg.mla;
  m.num_heads = H;
  m.kv_lora_rank = kMlaRank;
  m.qk_nope_head_dim = kMlaNope;
  m.qk_rope_head_dim = kMlaRope;
  m.v_head_dim = kMlaV;
  m.use_output_gate = true;
  m.low_rank_norm_eps = 1e-6;
  L.cfg.file = "test";
  L.cfg.rms_norm_eps = 1e-5;
  L.scale = static_cast<float>(m.softmax_scale());
  auto lin = [&](int64_t rows, int64_t cols, float scale) {
    return cpu::make_f32_linear(g.normal(static_cast<size_t>(rows * cols), scale / std::sqrt(static_cast<float>(cols))),
                                rows, cols);
  };
  L.w.q = lin(H * kMlaQk, L.hidden, 2.0f);  // scores of a few units: peaked softmax rows
  L.w.kv_a = lin(kMlaRow, L.hidden, 1.0f);
  L.w.kv_a_norm = g.uniform(kMlaRank, 0.5f, 1.5f);
  std::vector<float> kv_b = test::round_bf16(g.normal(static_cast<size_t>(H * 256 * kMlaRank), 1.0f / std::sqrt(512.0f)));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t e = 0; e < kMlaNope; ++e) {
      const float* uk = kv_b.data() + (h * 256 + e) * kMlaRank;
      const float* uv = kv_b.data() + (h * 256 + kMlaNope + e) * kMlaRank;
      L.w.absorbed.w_uk.insert(L.w.absorbed.w_uk.end(), uk, uk + kMlaRank);
      L.w.absorbed.w_uv.insert(L.w.absorbed.w_uv.end(), uv, uv + kMlaRank);
    }
  }
  L.w_uk_rows = L.w.absorbed.w_uk;
  L.w_uv_rows = L.w.absorbed.w_uv;
  L.w.kv_b = cpu::make_f32_linear(std::move(kv_b), H * 256, kMlaRank);
  L.w.g = lin(H * kMlaV, L.hidden, 1.5f);
  std::vector<float> eye(static_cast<size_t>(L.hidden * L.hidden), 0.0f);
  for (int64_t i = 0; i < L.hidden; ++i) eye[i * L.hidden + i] = 1.0f;
  L.w.o = cpu::make_f32_linear(std::move(eye), L.hidden, L.hidden);
  return L;
}

Tensor cpu_mixer(const MlaLayer& L, const Tensor& x, const std::vector<int>& lens, std::vector<SequenceState>& st) {
  std::vector<SeqSlice> slices;
  int64_t row = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    slices.push_back({row, lens[i], &st[i]});
    row += lens[i];
  }
  Tensor out;
  cpu::mla_mixer(L.cfg, 0, L.w, x, slices, out);
  for (size_t i = 0; i < lens.size(); ++i) st[i].length += lens[i];
  return out;
}

// CPU states over their own pages of a paged latent cache (one MLA layer), kKvBlocksPerState blocks each.
constexpr int64_t kKvBlocksPerState = 16;
std::vector<SequenceState> fresh_states(size_t n) {
  static std::deque<LatentPages> pools;  // outlive every test's states
  LatentPages& pages = pools.emplace_back(static_cast<int64_t>(n) * kKvBlocksPerState, 64, kMlaRow, std::vector<int64_t>{0});
  std::vector<SequenceState> st(n);
  for (size_t i = 0; i < n; ++i) {
    st[i].latent = &pages;
    for (int64_t b = 0; b < kKvBlocksPerState; ++b) st[i].blocks.push_back(static_cast<int32_t>(i * kKvBlocksPerState + b));
  }
  return st;
}

// The sequence's cached rows [c | k_pe], position after position.
std::vector<float> cache_rows(const SequenceState& s) {
  std::vector<float> rows;
  for (int64_t j = 0; j < s.length; ++j) {
    const float* r = s.latent->row(s.blocks, 0, j);
    rows.insert(rows.end(), r, r + kMlaRow);
  }
  return rows;
}

int64_t cache_len(const SequenceState& s) { return s.length; }

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  const test::ErrorStats s = test::compare(got, std::vector<double>(ref.begin(), ref.end()));
  std::printf("[ error  ] %-48s rel_l2 %.2e (tolerance %.1e) max_abs %.2e\n", what.c_str(), s.rel_l2, tol, s.max_abs);
  EXPECT_EQ(s.non_finite, 0) << what;
  EXPECT_LT(s.rel_l2, tol) << what << ": max_abs " << s.max_abs << " ref_rms " << s.ref_rms;
  EXPECT_GT(s.ref_rms, 1e-3) << what << ": the reference is (nearly) zero";
}

// Expanded-form GPU attention for the new rows x of each sequence (lens), against the whole cache
// the CPU states hold after the CPU call (the new rows included).
std::vector<float> gpu_prefill(const MlaLayer& L, const Tensor& x, const std::vector<int>& lens,
                               const std::vector<SequenceState>& st, DType gate_t, DType out_t) {
  Arena& a = test::arena();
  Tensor q, gate;
  cpu::linear(*L.w.q, x, q);
  cpu::linear(*L.w.g, x, gate);
  std::vector<int32_t> cu_q{0}, cu_kv{0};
  std::vector<float> rows;
  for (size_t i = 0; i < lens.size(); ++i) {
    cu_q.push_back(cu_q.back() + lens[i]);
    cu_kv.push_back(cu_kv.back() + static_cast<int32_t>(cache_len(st[i])));
    const std::vector<float> cached = cache_rows(st[i]);
    rows.insert(rows.end(), cached.begin(), cached.end());
  }
  const int64_t Tkv = cu_kv.back();
  Tensor latent(Tkv, kMlaRank), kvb;
  for (int64_t j = 0; j < Tkv; ++j) std::copy_n(rows.data() + j * kMlaRow, kMlaRank, latent.row(j));
  cpu::linear(*L.w.kv_b, latent, kvb);
  const DeviceTensor dq = upload_f32(a, q.data.data(), q.rows, q.cols, DType::kBF16, "q");
  const DeviceTensor dkv = upload_f32(a, kvb.data.data(), Tkv, kvb.cols, DType::kBF16, "kvb");
  const DeviceTensor drows = upload_f32(a, rows.data(), Tkv, kMlaRow, DType::kBF16, "cache rows");
  const DeviceTensor dg = upload_f32(a, gate.data.data(), gate.rows, gate.cols, gate_t, "gate");
  const DeviceTensor out = a.alloc_tensor(out_t, q.rows, L.H * kMlaV, "out");
  poison(out);
  mla_prefill_attention(test::upload_i32(cu_q, "cu_q").as<int32_t>(), test::upload_i32(cu_kv, "cu_kv").as<int32_t>(),
                        static_cast<int>(lens.size()), *std::max_element(lens.begin(), lens.end()), dq, dkv,
                        drows.col_slice(kMlaRank, kMlaRope), dg, L.scale, out, nullptr);
  return download_f32(out);
}

// Absorbed-form GPU decode of one new token per sequence (x: one row each), the sequences' caches
// (new token included) laid out in shuffled 64-row pages; rows past each length are NaN.
std::vector<float> gpu_decode(const MlaLayer& L, const Tensor& x, const std::vector<SequenceState>& st, int ranges,
                              MlaDecodeKernel kernel, MlaDecodeSchedule schedule, test::Rng& g) {
  Arena& a = test::arena();
  const int B = static_cast<int>(st.size());
  constexpr int kPage = 64;
  Tensor q, gate;
  cpu::linear(*L.w.q, x, q);
  cpu::linear(*L.w.g, x, gate);
  std::vector<int32_t> lens;
  int pages = 0, max_pages = 0, max_len = 0;
  for (const auto& s : st) {
    lens.push_back(static_cast<int32_t>(cache_len(s)));
    const int p = (lens.back() + kPage - 1) / kPage;
    pages += p, max_pages = std::max(max_pages, p), max_len = std::max(max_len, lens.back());
  }
  std::vector<int32_t> perm(static_cast<size_t>(pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g.gen());
  std::vector<float> cache(static_cast<size_t>(pages) * kPage * kMlaRow, std::nanf(""));
  std::vector<int32_t> table(static_cast<size_t>(B) * max_pages, 0);
  int next = 0;
  for (int b = 0; b < B; ++b) {
    const std::vector<float> cached = cache_rows(st[b]);
    for (int j = 0; j < lens[b]; ++j) {
      if (j % kPage == 0) table[static_cast<size_t>(b) * max_pages + j / kPage] = perm[next++];
      const int64_t row = static_cast<int64_t>(table[static_cast<size_t>(b) * max_pages + j / kPage]) * kPage + j % kPage;
      std::copy_n(cached.data() + static_cast<int64_t>(j) * kMlaRow, kMlaRow, cache.data() + row * kMlaRow);
    }
  }
  const DeviceTensor dcache = upload_f32(a, cache.data(), static_cast<int64_t>(pages) * kPage, kMlaRow, DType::kBF16, "cache");
  const DeviceTensor dtable = test::upload_i32(table, "block table");
  const DeviceTensor dlens = test::upload_i32(lens, "seqlens");
  const DeviceTensor dq = upload_f32(a, q.data.data(), B, q.cols, DType::kF32, "q");
  const DeviceTensor uk = upload_f32(a, L.w_uk_rows.data(), L.H * kMlaNope, kMlaRank, DType::kBF16, "w_uk");
  const DeviceTensor uv = upload_f32(a, L.w_uv_rows.data(), L.H * kMlaV, kMlaRank, DType::kBF16, "w_uv");
  const DeviceTensor dg = upload_f32(a, gate.data.data(), B, gate.cols, DType::kBF16, "gate");
  const DeviceTensor q_abs = a.alloc_tensor(DType::kBF16, B, L.H * kMlaRow, "q_abs");
  poison(q_abs);
  mla_absorb_q(dq, uk, q_abs, nullptr);
  const int sms = list_devices().at(0).multiprocessors;
  const MlaDecodePlan plan = mla_decode_plan(B, static_cast<int>(L.H), max_len, sms, kernel, schedule, ranges);
  void* ws = a.alloc(mla_decode_workspace_bytes(plan, B, static_cast<int>(L.H)), "mla ws");
  const DeviceTensor o_lat = a.alloc_tensor(DType::kF32, B, L.H * kMlaRank, "o_lat");
  poison(o_lat);
  MlaPagedCache pc;
  pc.rows = dcache.data, pc.num_rows = dcache.rows, pc.page_size = kPage, pc.block_table = dtable.as<int32_t>(), pc.block_table_ld = max_pages;
  mla_decode_attention(q_abs, pc, dlens.as<int32_t>(), B, L.scale, plan, ws, o_lat, nullptr);
  const DeviceTensor out = a.alloc_tensor(DType::kF32, B, L.H * kMlaV, "out");
  poison(out);
  mla_unabsorb_o(o_lat, uv, dg, out, nullptr);
  return download_f32(out);
}

struct PrefillCase {
  int64_t heads;
  DType gate, out;
};

class MlaPrefill : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(MlaPrefill, PrefillAndContinuedPrefillMatchCpu) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  const PrefillCase c = GetParam();
  const uint64_t seed = test::seed_or(5000 + static_cast<uint64_t>(c.heads) + (c.out == DType::kBF16 ? 100 : 0));
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Rng g(seed);
  const MlaLayer L = make_layer(c.heads, g);
  const std::vector<int> lens1 = {2, 37, 64, 100, 131}, lens2 = {3, 70, 1, 64, 2};
  std::vector<SequenceState> st = fresh_states(lens1.size());
  for (const auto* lens : {&lens1, &lens2}) {
    Tensor x(std::accumulate(lens->begin(), lens->end(), int64_t{0}), L.hidden);
    x.data = g.normal(x.data.size(), 1.0f);
    const Tensor ref = cpu_mixer(L, x, *lens, st);
    const double tol = kTol + (c.out == DType::kBF16 ? 1.0 / 256 : 0.0);
    expect_close(gpu_prefill(L, x, *lens, st, c.gate, c.out), ref.data, tol,
                 lens == &lens1 ? "prefill" : "prefill continuing the cache");
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, MlaPrefill,
                         ::testing::Values(PrefillCase{4, DType::kF32, DType::kF32},
                                           PrefillCase{3, DType::kBF16, DType::kBF16},
                                           PrefillCase{20, DType::kBF16, DType::kF32}),
                         [](const ::testing::TestParamInfo<PrefillCase>& info) {
                           const PrefillCase& c = info.param;
                           return "h" + std::to_string(c.heads) + (c.gate == DType::kBF16 ? "_gbf16" : "_gf32") +
                                  (c.out == DType::kBF16 ? "_obf16" : "_of32");
                         });

struct DecodeCase {
  int64_t heads;
  int ranges;  // 0: mla_decode_plan's count
  MlaDecodeKernel kernel = MlaDecodeKernel::kAuto;
  MlaDecodeSchedule schedule = MlaDecodeSchedule::kAuto;
};

class MlaDecode : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(MlaDecode, AbsorbedDecodeMatchesCpu) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  const DecodeCase c = GetParam();
  const uint64_t seed = test::seed_or(7000 + static_cast<uint64_t>(c.heads) * 10 + static_cast<uint64_t>(c.ranges));
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Rng g(seed);
  const MlaLayer L = make_layer(c.heads, g);
  const std::vector<int> lens = {1, 63, 64, 65, 200, 300};
  std::vector<SequenceState> st = fresh_states(lens.size());
  Tensor x(std::accumulate(lens.begin(), lens.end(), int64_t{0}), L.hidden);
  x.data = g.normal(x.data.size(), 1.0f);
  cpu_mixer(L, x, lens, st);
  const std::vector<int> ones(lens.size(), 1);
  for (int step = 0; step < 2; ++step) {
    Tensor xd(static_cast<int64_t>(lens.size()), L.hidden);
    xd.data = g.normal(xd.data.size(), 1.0f);
    const Tensor ref = cpu_mixer(L, xd, ones, st);
    expect_close(gpu_decode(L, xd, st, c.ranges, c.kernel, c.schedule, g), ref.data, kTol,
                 "decode step " + std::to_string(step));
  }
}

// The decode lengths (2 … 302) are 1 to 5 tiles each, 15 or 16 in all: 3, 5 and 7 balanced ranges cross
// sequence boundaries mid-sequence and at them; 20 asked for are cut to 8 (two tiles per range).
constexpr MlaDecodeSchedule kPerSeq = MlaDecodeSchedule::kPerSequence, kBalanced = MlaDecodeSchedule::kBalanced,
                            kAdaptive = MlaDecodeSchedule::kAdaptive;
INSTANTIATE_TEST_SUITE_P(Cases, MlaDecode,
                         ::testing::Values(DecodeCase{4, 0, MlaDecodeKernel::kMma}, DecodeCase{4, 1, MlaDecodeKernel::kMma},
                                           DecodeCase{4, 3, MlaDecodeKernel::kMma}, DecodeCase{20, 0, MlaDecodeKernel::kMma},
                                           DecodeCase{20, 7, MlaDecodeKernel::kMma}, DecodeCase{16, 2},
                                           DecodeCase{96, 0}, DecodeCase{96, 3, MlaDecodeKernel::kMma},
                                           DecodeCase{4, 3, MlaDecodeKernel::kWgmma, kPerSeq},
                                           DecodeCase{20, 0, MlaDecodeKernel::kWgmma},
                                           DecodeCase{40, 7, MlaDecodeKernel::kWgmma, kPerSeq},
                                           DecodeCase{64, 1, MlaDecodeKernel::kWgmma, kPerSeq},
                                           DecodeCase{96, 3, MlaDecodeKernel::kWgmma, kPerSeq},
                                           DecodeCase{96, 1, MlaDecodeKernel::kWgmma, kBalanced},
                                           DecodeCase{96, 3, MlaDecodeKernel::kWgmma, kBalanced},
                                           DecodeCase{40, 7, MlaDecodeKernel::kWgmma, kBalanced},
                                           DecodeCase{96, 20, MlaDecodeKernel::kWgmma, kBalanced},
                                           DecodeCase{64, 5, MlaDecodeKernel::kWgmma, kBalanced},
                                           DecodeCase{96, 3, MlaDecodeKernel::kWgmma, kAdaptive}),
                         [](const ::testing::TestParamInfo<DecodeCase>& info) {
                           const DecodeCase& c = info.param;
                           const char* k = c.kernel == MlaDecodeKernel::kMma     ? "_mma"
                                           : c.kernel == MlaDecodeKernel::kWgmma ? "_wgmma"
                                                                                 : "_auto";
                           const char* s = c.schedule == kPerSeq     ? "_perseq"
                                           : c.schedule == kBalanced ? "_balanced"
                                           : c.schedule == kAdaptive ? "_adaptive"
                                                                     : "";
                           return "h" + std::to_string(c.heads) + "_ranges" + std::to_string(c.ranges) + k + s;
                         });

// The absorbed decode of token n+1 equals the last row of the expanded prefill of n+1 tokens (two
// GPU paths with different bf16 roundings; same tolerance).
TEST(MlaCuda, DecodeAfterPrefillEqualsLongerPrefill) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  const uint64_t seed = test::seed_or(6001);
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Rng g(seed);
  const MlaLayer L = make_layer(8, g);
  const std::vector<int> lens = {2, 64, 129};
  std::vector<SequenceState> st = fresh_states(lens.size());
  Tensor x(std::accumulate(lens.begin(), lens.end(), int64_t{0}), L.hidden);
  x.data = g.normal(x.data.size(), 1.0f);
  cpu_mixer(L, x, lens, st);
  Tensor xd(static_cast<int64_t>(lens.size()), L.hidden);
  xd.data = g.normal(xd.data.size(), 1.0f);
  const std::vector<int> ones(lens.size(), 1);
  cpu_mixer(L, xd, ones, st);  // appends the new rows to the caches
  const std::vector<float> dec = gpu_decode(L, xd, st, 0, MlaDecodeKernel::kAuto, MlaDecodeSchedule::kAuto, g);
  // The expanded prefill of all n+1 tokens of each sequence; its last row per sequence.
  std::vector<int> longer(lens);
  for (int& l : longer) ++l;
  Tensor xl(x.rows + xd.rows, L.hidden);
  int64_t src = 0, dst = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    for (int t = 0; t < lens[i]; ++t) std::copy_n(x.row(src++), L.hidden, xl.row(dst++));
    std::copy_n(xd.row(static_cast<int64_t>(i)), L.hidden, xl.row(dst++));
  }
  const std::vector<float> full = gpu_prefill(L, xl, longer, st, DType::kF32, DType::kF32);
  std::vector<float> pre;
  int64_t end = 0;
  const int64_t width = L.H * kMlaV;
  for (int n : longer) {
    end += n;
    pre.insert(pre.end(), full.begin() + (end - 1) * width, full.begin() + end * width);
  }
  expect_close(dec, pre, kTol, "decode vs prefill of the longer sequence");
}

}  // namespace
}  // namespace k3::cuda
