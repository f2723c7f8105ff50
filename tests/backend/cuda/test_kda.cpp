// KDA kernels (short conv, chunked prefill, fused decode, gated norm, state slots) against the CPU
// mixer cpu::kda_mixer (backend/cpu/kda.cpp). The layer's o_proj is the identity (hidden = P), so the
// CPU mixer's output IS the gated-norm output y the GPU pipeline produces; the GPU gets the very
// projections the CPU mixer computes internally (same cpu::linear calls on the same x). Fixed seeds
// (K3_TEST_SEED overrides), several sequences of different lengths (1, not multiples of 64, more
// than two chunks) in one call, non-trivial slot numbers, a second prefill continuing from the
// states, then batched decode steps.
//
// Tolerances (relative L2 over all outputs / states; in brackets the largest error measured on the
// H200 with the fixed seeds, 2026-11-29):
//   f32 I/O, fp32 FMA inter pass: 2e-5 [4.5e-7]. Both sides are fp32; they differ in summation order
//     and in the exponentials (the A/Aqk phase uses __expf, ≤ 2^-21 relative for the arguments
//     here), and the chunked form reassociates the recurrence: the CPU's own chunked-vs-recurrent
//     test holds 2e-5 of the magnitude.
//   bf16 I/O: 1e-2 [4.1e-3]. Inputs (q/k/v/f/b/g), the conv output, o and y are rounded to bf16
//     (2^-9 relative each); the norms and gates are smooth, so the output moves by a few 2^-9.
// The conv state holds raw inputs: with f32 I/O it must equal the CPU's bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/attention/kda/kda_tuning.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"

namespace k3::cuda {
namespace {

constexpr int64_t kD = kKdaHeadDim;

struct KdaLayer {
  K3Config cfg;
  KdaWeights w;
  int64_t H = 0, P = 0, hidden = 0, W = 4;
  std::vector<float> conv_w;  // [3P][W]: q_conv | k_conv | v_conv
};

KdaLayer make_layer(int64_t H, bool safe, test::Rng& g) {
  KdaLayer L;
  L.H = H, L.P = H * kD, L.hidden = L.P;
  L.cfg.file = "test";
  L.cfg.rms_norm_eps = 1e-5;
  L.cfg.kda.num_heads = H;
  L.cfg.kda.head_dim = kD;
  L.cfg.kda.short_conv_kernel_size = L.W;
  L.cfg.kda.use_full_rank_gate = true;
  if (safe) L.cfg.kda.gate_lower_bound = -5.0;
  auto lin = [&](int64_t rows, int64_t cols, float scale) {
    return cpu::make_f32_linear(g.normal(static_cast<size_t>(rows * cols), scale / std::sqrt(static_cast<float>(cols))),
                                rows, cols);
  };
  const int64_t P = L.P;
  L.w.q = lin(P, L.hidden, 1.0f);
  L.w.k = lin(P, L.hidden, 1.0f);
  L.w.v = lin(P, L.hidden, 1.0f);
  L.w.f_a = lin(kD, L.hidden, 1.0f);
  L.w.f_b = lin(P, kD, 0.5f);
  L.w.b = lin(H, L.hidden, 1.0f);
  L.w.g = lin(P, L.hidden, 1.5f);
  std::vector<float> eye(static_cast<size_t>(P * P), 0.0f);
  for (int64_t i = 0; i < P; ++i) eye[i * P + i] = 1.0f;
  L.w.o = cpu::make_f32_linear(std::move(eye), P, P);
  L.w.conv.q = g.normal(static_cast<size_t>(P * L.W), 0.5f);
  L.w.conv.k = g.normal(static_cast<size_t>(P * L.W), 0.5f);
  L.w.conv.v = g.normal(static_cast<size_t>(P * L.W), 0.5f);
  // Decays from e^-2.5 to ~1 per step: short and long memories in every head.
  L.w.a_log = safe ? g.uniform(static_cast<size_t>(H), -0.5f, 0.5f) : g.uniform(static_cast<size_t>(H), -3.0f, 0.0f);
  L.w.dt_bias = g.uniform(static_cast<size_t>(P), -6.0f, safe ? -1.0f : 0.0f);
  L.w.o_norm = g.uniform(static_cast<size_t>(kD), 0.5f, 1.5f);
  for (const Floats* c : {&L.w.conv.q, &L.w.conv.k, &L.w.conv.v}) L.conv_w.insert(L.conv_w.end(), c->begin(), c->end());
  return L;
}

// The projections cpu::kda_mixer computes from x, in the same calls.
struct Proj {
  Tensor q, k, v, f, b, g;
};
Proj project(const KdaLayer& L, const Tensor& x) {
  Proj p;
  Tensor f_low;
  cpu::linear(*L.w.q, x, p.q);
  cpu::linear(*L.w.k, x, p.k);
  cpu::linear(*L.w.v, x, p.v);
  cpu::linear(*L.w.f_a, x, f_low);
  cpu::linear(*L.w.f_b, f_low, p.f);
  cpu::linear(*L.w.b, x, p.b);
  cpu::linear(*L.w.g, x, p.g);
  return p;
}

std::vector<float> qkv_rows(const Proj& p) {
  const int64_t T = p.q.rows, P = p.q.cols;
  std::vector<float> x(static_cast<size_t>(T * 3 * P));
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(p.q.row(t), P, x.data() + t * 3 * P);
    std::copy_n(p.k.row(t), P, x.data() + t * 3 * P + P);
    std::copy_n(p.v.row(t), P, x.data() + t * 3 * P + 2 * P);
  }
  return x;
}

struct GpuKda {
  KdaStatePool pool;
  DeviceTensor conv_w, a_log, dt_bias, o_norm;
  KdaGate gate;
  float eps = 1e-5f;

  GpuKda(const KdaLayer& L, int slots) {
    Arena& a = test::arena();
    pool.slots = slots, pool.heads = L.H, pool.head_dim = kD, pool.conv_width = L.W;
    pool.recurrent = a.alloc_n<float>(pool.recurrent_floats_per_slot() * slots, "kda recurrent pool");
    pool.conv = a.alloc_n<float>(pool.conv_floats_per_slot() * slots, "kda conv pool");
    poison(DeviceTensor(pool.recurrent, DType::kF32, slots, static_cast<int64_t>(pool.recurrent_floats_per_slot())));
    poison(DeviceTensor(pool.conv, DType::kF32, slots, static_cast<int64_t>(pool.conv_floats_per_slot())));
    std::vector<int32_t> all(static_cast<size_t>(slots));
    std::iota(all.begin(), all.end(), 0);
    kda_state_zero(pool, test::upload_i32(all, "slots").as<int32_t>(), slots, nullptr);
    conv_w = upload_f32(a, L.conv_w.data(), 3 * L.P, L.W, DType::kF32, "conv w");
    a_log = upload_f32(a, L.w.a_log.data(), 1, L.H, DType::kF32, "a_log");
    dt_bias = upload_f32(a, L.w.dt_bias.data(), 1, L.P, DType::kF32, "dt_bias");
    o_norm = upload_f32(a, L.w.o_norm.data(), 1, kD, DType::kF32, "o_norm");
    gate.safe = L.cfg.kda.gate_lower_bound.has_value();
    gate.lower_bound = gate.safe ? static_cast<float>(*L.cfg.kda.gate_lower_bound) : 0.0f;
    gate.a_log = a_log.as<float>();
    gate.dt_bias = dt_bias.as<float>();
    eps = static_cast<float>(L.cfg.rms_norm_eps);
  }

  std::vector<float> recurrent(int slot) const {
    const size_t n = pool.recurrent_floats_per_slot();
    return download_f32(DeviceTensor(pool.recurrent + n * slot, DType::kF32, 1, static_cast<int64_t>(n)));
  }
  std::vector<float> conv(int slot) const {
    const size_t n = pool.conv_floats_per_slot();
    return download_f32(DeviceTensor(pool.conv + n * slot, DType::kF32, 1, static_cast<int64_t>(n)));
  }

  // Conv → chunked prefill → gated norm over packed sequences; returns y [T, P].
  std::vector<float> prefill(const KdaLayer& L, const Proj& p, const std::vector<int>& lens,
                             const std::vector<int32_t>& slots, DType io, KdaLoads loads = KdaLoads::kCpAsync,
                             KdaInterCols cols = KdaInterCols::kAuto) {
    Arena& a = test::arena();
    const int64_t T = p.q.rows, P = L.P;
    std::vector<int32_t> cu{0};
    for (int n : lens) cu.push_back(cu.back() + n);
    EXPECT_EQ(cu.back(), T);
    KdaBatch batch;
    batch.cu_seqlens = test::upload_i32(cu, "cu").as<int32_t>();
    batch.slots = test::upload_i32(slots, "slots").as<int32_t>();
    batch.n = static_cast<int>(lens.size());
    batch.max_len = *std::max_element(lens.begin(), lens.end());
    batch.total_rows = T;
    const std::vector<float> xh = qkv_rows(p);
    const DeviceTensor x = upload_f32(a, xh.data(), T, 3 * P, io, "qkv~");
    const DeviceTensor y = a.alloc_tensor(io, T, 3 * P, "qkv");
    poison(y);
    kda_short_conv(batch, x, conv_w.as<float>(), pool, y, nullptr);
    const DeviceTensor f = upload_f32(a, p.f.data.data(), T, P, io, "f~");
    const DeviceTensor b = upload_f32(a, p.b.data.data(), T, L.H, io, "b~");
    const DeviceTensor g = upload_f32(a, p.g.data.data(), T, P, io, "g~");
    const DeviceTensor o = a.alloc_tensor(io, T, P, "o");
    poison(o);
    void* ws = a.alloc(kda_prefill_workspace_bytes(batch, L.H), "kda workspace");
    kda_prefill(batch, y.col_slice(0, P), y.col_slice(P, P), y.col_slice(2 * P, P), f, b, gate, pool, ws, o, nullptr,
                loads, cols);
    const DeviceTensor out = a.alloc_tensor(io, T, P, "y");
    poison(out);
    kda_gated_rms_norm(o, g, o_norm.as<float>(), eps, out, nullptr);
    return download_f32(out);
  }

  // One token per sequence: conv step → fused decode (gated norm inside); returns y [n, P].
  std::vector<float> decode(const KdaLayer& L, const Proj& p, const std::vector<int32_t>& slots, DType io) {
    Arena& a = test::arena();
    const int64_t n = p.q.rows, P = L.P;
    KdaBatch batch;
    batch.slots = test::upload_i32(slots, "slots").as<int32_t>();
    batch.n = static_cast<int>(n);
    batch.max_len = 1;
    batch.total_rows = n;
    const std::vector<float> xh = qkv_rows(p);
    const DeviceTensor x = upload_f32(a, xh.data(), n, 3 * P, io, "qkv~");
    const DeviceTensor y = a.alloc_tensor(io, n, 3 * P, "qkv");
    poison(y);
    kda_short_conv(batch, x, conv_w.as<float>(), pool, y, nullptr);
    const DeviceTensor f = upload_f32(a, p.f.data.data(), n, P, io, "f~");
    const DeviceTensor b = upload_f32(a, p.b.data.data(), n, L.H, io, "b~");
    const DeviceTensor g = upload_f32(a, p.g.data.data(), n, P, io, "g~");
    const DeviceTensor out = a.alloc_tensor(io, n, P, "y");
    poison(out);
    kda_decode(batch, y.col_slice(0, P), y.col_slice(P, P), y.col_slice(2 * P, P), f, b, gate, pool,
               o_norm.as<float>(), g, eps, out, nullptr);
    return download_f32(out);
  }
};

// CPU: the mixer over packed slices of the given sequences' states.
Tensor cpu_mixer(const KdaLayer& L, const Tensor& x, const std::vector<int>& lens, std::vector<SequenceState>& st,
                 const std::vector<int>& which) {
  std::vector<SeqSlice> slices;
  int64_t row = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    slices.push_back({row, lens[i], &st[static_cast<size_t>(which[i])]});
    row += lens[i];
  }
  Tensor out;
  cpu::kda_mixer(L.cfg, 0, L.w, x, slices, out);
  return out;
}

test::ErrorStats stats(const std::vector<float>& got, const std::vector<float>& ref) {
  return test::compare(got, std::vector<double>(ref.begin(), ref.end()));
}

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  const test::ErrorStats s = stats(got, ref);
  std::printf("[ error  ] %-48s rel_l2 %.2e (tolerance %.1e) max_abs %.2e\n", what.c_str(), s.rel_l2, tol, s.max_abs);
  EXPECT_EQ(s.non_finite, 0) << what;
  EXPECT_LT(s.rel_l2, tol) << what << ": max_abs " << s.max_abs << " ref_rms " << s.ref_rms;
  EXPECT_GT(s.ref_rms, 1e-4) << what << ": the reference is (nearly) zero";
}

struct KdaCase {
  bool safe;
  DType io;
  KdaLoads loads;
  KdaInterCols cols;
};

double out_tol(const KdaCase& c) {
  return c.io == DType::kBF16 ? 1e-2 : 2e-5;
}

class KdaPipeline : public ::testing::TestWithParam<KdaCase> {};

TEST_P(KdaPipeline, PrefillContinuedPrefillAndDecodeMatchCpu) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  const KdaCase c = GetParam();
  const uint64_t seed = test::seed_or(1000 + (c.safe ? 1 : 0) + (c.io == DType::kBF16 ? 2 : 0) +
                                (c.loads == KdaLoads::kBulk ? 8 : 0) + (c.cols == KdaInterCols::k16 ? 16 : 0));
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Rng g(seed);
  const KdaLayer L = make_layer(4, c.safe, g);
  const std::vector<int> lens1 = {1, 17, 64, 100, 130, 7}, lens2 = {70, 3, 1, 64, 129, 2};
  const std::vector<int32_t> slots = {5, 2, 7, 0, 3, 6};
  std::vector<int> which(lens1.size());
  std::iota(which.begin(), which.end(), 0);
  std::vector<SequenceState> st(lens1.size());
  for (auto& s : st) s.kda.resize(1);
  GpuKda gpu(L, 8);
  const double tol = out_tol(c);

  auto check_states = [&](const std::string& when) {
    for (size_t i = 0; i < st.size(); ++i) {
      const KdaLayerState& cs = st[i].kda[0];
      expect_close(gpu.recurrent(slots[i]), cs.recurrent, tol, when + ": recurrent state of sequence " + std::to_string(i));
      const std::vector<float> conv = gpu.conv(slots[i]);
      if (c.io == DType::kF32) {
        EXPECT_EQ(0, std::memcmp(conv.data(), cs.conv.data(), conv.size() * sizeof(float)))
            << when << ": conv state of sequence " << i << " (raw inputs, must be exact)";
      } else {
        expect_close(conv, cs.conv, 1.0 / 256, when + ": conv state of sequence " + std::to_string(i));
      }
    }
  };

  int64_t rows = std::accumulate(lens1.begin(), lens1.end(), int64_t{0});
  Tensor x1(rows, L.hidden);
  x1.data = g.normal(x1.data.size(), 1.0f);
  const Tensor ref1 = cpu_mixer(L, x1, lens1, st, which);
  expect_close(gpu.prefill(L, project(L, x1), lens1, slots, c.io, c.loads, c.cols), ref1.data, tol, "prefill");
  check_states("after prefill");

  rows = std::accumulate(lens2.begin(), lens2.end(), int64_t{0});
  Tensor x2(rows, L.hidden);
  x2.data = g.normal(x2.data.size(), 1.0f);
  const Tensor ref2 = cpu_mixer(L, x2, lens2, st, which);
  expect_close(gpu.prefill(L, project(L, x2), lens2, slots, c.io, c.loads, c.cols), ref2.data, tol, "continued prefill");
  check_states("after the continued prefill");

  const std::vector<int> ones(lens1.size(), 1);
  for (int step = 0; step < 3; ++step) {
    Tensor xd(static_cast<int64_t>(ones.size()), L.hidden);
    xd.data = g.normal(xd.data.size(), 1.0f);
    const Tensor refd = cpu_mixer(L, xd, ones, st, which);
    // The decode step itself is fp32 FMA; the tolerance follows the prefill that made the state.
    const double dtol = out_tol(c);
    expect_close(gpu.decode(L, project(L, xd), slots, c.io), refd.data, dtol, "decode step " + std::to_string(step));
  }
  check_states("after decoding");
}

INSTANTIATE_TEST_SUITE_P(Cases, KdaPipeline,
                         ::testing::Values(KdaCase{true, DType::kF32, KdaLoads::kCpAsync, KdaInterCols::k32},
                                           KdaCase{true, DType::kF32, KdaLoads::kBulk, KdaInterCols::k16},
                                           KdaCase{false, DType::kF32, KdaLoads::kBulk, KdaInterCols::k32},
                                           KdaCase{false, DType::kF32, KdaLoads::kCpAsync, KdaInterCols::k16},
                                           KdaCase{true, DType::kBF16, KdaLoads::kBulk, KdaInterCols::kAuto},
                                           KdaCase{false, DType::kBF16, KdaLoads::kCpAsync, KdaInterCols::kAuto}),
                         [](const ::testing::TestParamInfo<KdaCase>& info) {
                           const KdaCase& c = info.param;
                           return std::string(c.safe ? "k3gate" : "softplus") + (c.io == DType::kBF16 ? "_bf16" : "_f32") +
                                  (c.loads == KdaLoads::kBulk ? "_bulk" : "_cpasync") +
                                  (c.cols == KdaInterCols::k16 ? "_cols16" : c.cols == KdaInterCols::k32 ? "_cols32" : "");
                         });

// Prefill of n tokens then one decode step gives the same last output and state as a prefill of the
// n + 1 tokens (two different code paths on the GPU, the longer prefill with bulk-copy tiles; fp32
// both: 2e-5 as above [2.6e-7]).
TEST(KdaCuda, DecodeAfterPrefillEqualsLongerBulkPrefill) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  const uint64_t seed = test::seed_or(2001);
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Rng g(seed);
  const KdaLayer L = make_layer(2, true, g);
  const std::vector<int> lens = {5, 64, 127, 200};
  const int n = static_cast<int>(lens.size());
  std::vector<int> longer(lens);
  for (int& l : longer) ++l;
  const int64_t rows_long = std::accumulate(longer.begin(), longer.end(), int64_t{0});
  Tensor x(rows_long, L.hidden);
  x.data = g.normal(x.data.size(), 1.0f);
  const Proj p_long = project(L, x);
  // Split the packed rows: the first lens[i] rows of each sequence, then its last row (the same
  // projected values on both paths, so the conv states must agree bit for bit).
  Proj ps, pl;
  const std::vector<std::pair<const Tensor*, std::pair<Tensor*, Tensor*>>> parts = {
      {&p_long.q, {&ps.q, &pl.q}}, {&p_long.k, {&ps.k, &pl.k}}, {&p_long.v, {&ps.v, &pl.v}},
      {&p_long.f, {&ps.f, &pl.f}}, {&p_long.b, {&ps.b, &pl.b}}, {&p_long.g, {&ps.g, &pl.g}}};
  for (const auto& [whole, halves] : parts) {
    *halves.first = Tensor(rows_long - n, whole->cols);
    *halves.second = Tensor(n, whole->cols);
    int64_t src = 0, dst = 0;
    for (int i = 0; i < n; ++i) {
      for (int t = 0; t < lens[i]; ++t) std::copy_n(whole->row(src++), whole->cols, halves.first->row(dst++));
      std::copy_n(whole->row(src++), whole->cols, halves.second->row(i));
    }
  }
  GpuKda gpu(L, 2 * n);
  const std::vector<int32_t> slots_a = {0, 1, 2, 3}, slots_b = {7, 6, 5, 4};
  gpu.prefill(L, ps, lens, slots_a, DType::kF32);
  const std::vector<float> dec = gpu.decode(L, pl, slots_a, DType::kF32);
  const std::vector<float> full = gpu.prefill(L, p_long, longer, slots_b, DType::kF32, KdaLoads::kBulk);
  std::vector<float> last;
  int64_t end = 0;
  for (int i = 0; i < n; ++i) {
    end += longer[i];
    last.insert(last.end(), full.begin() + (end - 1) * L.P, full.begin() + end * L.P);
  }
  expect_close(dec, last, 2e-5, "decode vs longer prefill");
  for (int i = 0; i < n; ++i) {
    expect_close(gpu.recurrent(slots_a[i]), gpu.recurrent(slots_b[i]), 2e-5, "state " + std::to_string(i));
    const std::vector<float> ca = gpu.conv(slots_a[i]), cb = gpu.conv(slots_b[i]);
    EXPECT_EQ(0, std::memcmp(ca.data(), cb.data(), ca.size() * sizeof(float))) << "conv state " << i;
  }
}

// Save a slot, decode, restore it, decode the same token again: identical outputs and states, bit
// for bit (the kernels are deterministic and the copy is exact). Zeroing a slot zeroes it.
TEST(KdaCuda, StateSaveRestoreAndZero) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  const uint64_t seed = test::seed_or(3001);
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Rng g(seed);
  const KdaLayer L = make_layer(2, false, g);
  const std::vector<int> lens = {33, 90};
  const std::vector<int32_t> slots = {3, 1};
  Tensor x(123, L.hidden);
  x.data = g.normal(x.data.size(), 1.0f);
  GpuKda gpu(L, 4);
  GpuKda saved(L, 4);
  gpu.prefill(L, project(L, x), lens, slots, DType::kF32);
  const DeviceTensor src = test::upload_i32(slots, "src"), dst = test::upload_i32({0, 2}, "dst");
  kda_state_copy(gpu.pool, src.as<int32_t>(), saved.pool, dst.as<int32_t>(), 2, nullptr);
  Tensor xd(2, L.hidden);
  xd.data = g.normal(xd.data.size(), 1.0f);
  const Proj pd = project(L, xd);
  const std::vector<float> first = gpu.decode(L, pd, slots, DType::kF32);
  const std::vector<float> s_first = gpu.recurrent(slots[0]), c_first = gpu.conv(slots[0]);
  kda_state_copy(saved.pool, dst.as<int32_t>(), gpu.pool, src.as<int32_t>(), 2, nullptr);
  const std::vector<float> again = gpu.decode(L, pd, slots, DType::kF32);
  EXPECT_EQ(0, std::memcmp(first.data(), again.data(), first.size() * sizeof(float)));
  const std::vector<float> s_again = gpu.recurrent(slots[0]), c_again = gpu.conv(slots[0]);
  EXPECT_EQ(0, std::memcmp(s_first.data(), s_again.data(), s_first.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(c_first.data(), c_again.data(), c_first.size() * sizeof(float)));
  double mag = 0;
  for (float v : s_first) mag = std::max(mag, std::fabs(static_cast<double>(v)));
  EXPECT_GT(mag, 1e-3);
  kda_state_zero(gpu.pool, src.as<int32_t>(), 1, nullptr);
  for (float v : gpu.recurrent(slots[0])) ASSERT_EQ(v, 0.0f);
  for (float v : gpu.conv(slots[0])) ASSERT_EQ(v, 0.0f);
  EXPECT_NE(gpu.recurrent(slots[1]), std::vector<float>(gpu.pool.recurrent_floats_per_slot(), 0.0f));
}

}  // namespace
}  // namespace k3::cuda
