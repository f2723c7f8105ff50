// The any-geometry token mixers (generic_attention.h) against float64 host restatements of the CPU
// references (cpu::kda_mixer's gates, L2 norms, kda_head_recurrent and gated RMSNorm; cpu::mla_mixer's
// attend_expanded and output gate), and at the fast kernels' geometry against kda_prefill /
// kda_decode and mla_prefill_attention on the same inputs. Fresh random inputs (K3_TEST_SEED replays).
//
// Tolerances, per element |out − ref| ≤ rel·|ref| + rel·rms(ref), plus relative L2:
//   fp32 outputs: rel 1e-4, L2 2e-5. The kernels are fp32 throughout; the host is float64. Dot
//     products over ≤ 256 terms, a recurrence over ≤ 41 tokens with decays ≤ 1 and normalised keys,
//     expf/log1pf within a few ulp: errors of a few 1e-7 relative to the magnitudes.
//   bf16 outputs: rel 2^-8 (one rounding of the output), L2 4e-3.
//   fast vs generic KDA (fp32 both): L2 2e-5, as test_kda.cpp holds the chunked prefill to the CPU.
//   fast vs generic MLA: L2 1e-2, the fast kernel's bf16 P operand (see test_mla.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/attention/generic_attention.h"
#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"

namespace k3::cuda {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::vector<int32_t> prefix_sums(const std::vector<int>& lens) {
  std::vector<int32_t> cu{0};
  for (int n : lens) cu.push_back(cu.back() + n);
  return cu;
}

// Values as the device sees them after an upload as `t`.
std::vector<float> as_dtype(std::vector<float> v, DType t) { return t == DType::kBF16 ? test::round_bf16(std::move(v)) : v; }

double out_tol(DType out) { return out == DType::kBF16 ? 1.0 / 256 : 1e-4; }
double l2_tol(DType out) { return out == DType::kBF16 ? 4e-3 : 2e-5; }

void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double rel, double l2,
                  const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  const test::ErrorStats s = test::compare(got, ref);
  std::printf("[ error  ] %-52s rel_l2 %.2e (tolerance %.1e) max_abs %.2e\n", what.c_str(), s.rel_l2, l2, s.max_abs);
  EXPECT_EQ(s.non_finite, 0) << what;
  EXPECT_LT(s.rel_l2, l2) << what << ": max_abs " << s.max_abs << " ref_rms " << s.ref_rms;
  EXPECT_EQ(test::count_outside(got, ref, rel, rel * s.ref_rms), 0) << what << ": elements outside the tolerance";
  EXPECT_GT(s.ref_rms, 1e-3) << what << ": the reference is (nearly) zero";
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// ---------------------------------------------------------------------------------------------
// KDA delta rule

// One layer's inputs for packed rows: qkv [T][3P] (q | k | v, the kernels get column views), f [T][P],
// b [T][H], on the grid of the input dtype.
struct KdaInputs {
  int64_t D = 0, H = 0, P = 0, T = 0;
  std::vector<float> qkv, f, b;
};

struct KdaParams {
  bool safe = true;
  float lower_bound = -5.0f;
  std::vector<float> a_log, dt_bias;
};

KdaInputs make_kda_inputs(int64_t D, int64_t H, int64_t T, DType in, test::Rng& rng) {
  KdaInputs x;
  x.D = D, x.H = H, x.P = H * D, x.T = T;
  x.qkv = as_dtype(rng.normal(static_cast<size_t>(T * 3 * x.P), 1.0f), in);
  x.f = as_dtype(rng.normal(static_cast<size_t>(T * x.P), 1.0f), in);
  x.b = as_dtype(rng.normal(static_cast<size_t>(T * H), 1.5f), in);
  return x;
}

// The recurrence of kda_head_recurrent with kda_mixer's gates and L2 norms, in float64, over the
// packed sequences (rows: lens[s] each, in order); S: [slots][H][D][D], advanced in place.
std::vector<double> host_kda(const KdaInputs& x, const KdaParams& p, const std::vector<int>& lens,
                             const std::vector<int32_t>& slots, std::vector<double>& S) {
  const int64_t D = x.D, H = x.H, P = x.P;
  std::vector<double> o(static_cast<size_t>(x.T * P)), q(D), k(D), u(D);
  int64_t row = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int t = 0; t < lens[s]; ++t, ++row) {
      const float* xr = x.qkv.data() + row * 3 * P;
      for (int64_t h = 0; h < H; ++h) {
        double* St = S.data() + (slots[s] * H + h) * D * D;
        double qq = 0, kk = 0;
        for (int64_t d = 0; d < D; ++d) {
          q[d] = xr[h * D + d], k[d] = xr[P + h * D + d];
          qq += q[d] * q[d], kk += k[d] * k[d];
        }
        const double rq = 1.0 / std::sqrt(static_cast<double>(D)) / std::sqrt(qq + 1e-6), rk = 1.0 / std::sqrt(kk + 1e-6);
        for (int64_t d = 0; d < D; ++d) q[d] *= rq, k[d] *= rk;
        const double a = std::exp(static_cast<double>(p.a_log[h]));
        const double beta = sigmoid(x.b[row * H + h]);
        for (int64_t i = 0; i < D; ++i) {
          const double z = static_cast<double>(x.f[row * P + h * D + i]) + p.dt_bias[h * D + i];
          const double g = p.safe ? p.lower_bound * sigmoid(a * z) : -a * (z > 20.0 ? z : std::log1p(std::exp(z)));
          for (int64_t j = 0; j < D; ++j) St[i * D + j] *= std::exp(g);
        }
        for (int64_t j = 0; j < D; ++j) {
          double w = 0;
          for (int64_t i = 0; i < D; ++i) w += St[i * D + j] * k[i];
          u[j] = beta * (xr[2 * P + h * D + j] - w);
        }
        double* orow = o.data() + row * P + h * D;
        for (int64_t i = 0; i < D; ++i) {
          for (int64_t j = 0; j < D; ++j) St[i * D + j] += k[i] * u[j];
        }
        for (int64_t j = 0; j < D; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < D; ++i) acc += St[i * D + j] * q[i];
          orow[j] = acc;
        }
      }
    }
  }
  return o;
}

// A state pool on the device with the gate parameters.
struct GpuKdaState {
  KdaStatePool pool;
  DeviceTensor a_log, dt_bias;
  KdaGate gate;

  GpuKdaState(const KdaParams& p, int64_t D, int64_t H, int slots, const std::vector<float>& init) {
    Arena& a = test::arena();
    pool.slots = slots, pool.heads = H, pool.head_dim = D, pool.conv_width = 4;
    const DeviceTensor rec = upload_f32(a, init.data(), slots, static_cast<int64_t>(pool.recurrent_floats_per_slot()),
                                        DType::kF32, "kda recurrent pool");
    pool.recurrent = rec.as<float>();
    a_log = upload_f32(a, p.a_log.data(), 1, H, DType::kF32, "a_log");
    dt_bias = upload_f32(a, p.dt_bias.data(), 1, H * D, DType::kF32, "dt_bias");
    gate.safe = p.safe;
    gate.lower_bound = p.lower_bound;
    gate.a_log = a_log.as<float>();
    gate.dt_bias = dt_bias.as<float>();
  }
  std::vector<float> states() const {
    return download_f32(DeviceTensor(pool.recurrent, DType::kF32, pool.slots,
                                     static_cast<int64_t>(pool.recurrent_floats_per_slot())));
  }
};

// Device copies of the inputs: q, k, v are column views of the qkv rows.
struct GpuKdaInputs {
  DeviceTensor qkv, f, b;
  GpuKdaInputs(const KdaInputs& x, DType in) {
    Arena& a = test::arena();
    qkv = upload_f32(a, x.qkv.data(), x.T, 3 * x.P, in, "qkv");
    f = upload_f32(a, x.f.data(), x.T, x.P, in, "f");
    b = upload_f32(a, x.b.data(), x.T, x.H, in, "b");
  }
  DeviceTensor q() const { return qkv.col_slice(0, qkv.cols / 3); }
  DeviceTensor k() const { return qkv.col_slice(qkv.cols / 3, qkv.cols / 3); }
  DeviceTensor v() const { return qkv.col_slice(2 * qkv.cols / 3, qkv.cols / 3); }
};

KdaBatch make_batch(const std::vector<int>* lens, const std::vector<int32_t>& slots, int64_t rows) {
  KdaBatch batch;
  if (lens != nullptr) {
    batch.cu_seqlens = test::upload_i32(prefix_sums(*lens), "cu_seqlens").as<int32_t>();
    batch.max_len = *std::max_element(lens->begin(), lens->end());
  } else {
    batch.max_len = 1;
  }
  batch.slots = test::upload_i32(slots, "slots").as<int32_t>();
  batch.n = static_cast<int>(slots.size());
  batch.total_rows = rows;
  return batch;
}

struct KdaGenCase {
  int64_t D, H;
  bool safe;
  DType in, out;
};

class KdaGeneric : public ::testing::TestWithParam<KdaGenCase> {};

// A multi-token call (cu_seqlens; lengths 1, 7, 40 and 13) from non-zero states in scattered slots,
// then a one-token call (cu_seqlens = nullptr) continuing from them; outputs and states against the
// host. At D = 128 the fast chunked prefill and decode run on the same inputs from the same states.
TEST_P(KdaGeneric, MatchesHostRecurrence) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const KdaGenCase c = GetParam();
  const int64_t D = c.D, H = c.H, P = H * D;
  const std::vector<int> lens = {1, 7, 40, 13};
  const std::vector<int32_t> slots = {3, 0, 4, 1};  // slot 2 is not named: it must stay as it was
  const int n_slots = 5;
  const int64_t T = std::accumulate(lens.begin(), lens.end(), int64_t{0}), n = static_cast<int64_t>(lens.size());
  KdaParams p;
  p.safe = c.safe;
  // Decays from e^-2.5 to ~1 per step: short and long memories in every head.
  p.a_log = c.safe ? rng.uniform(static_cast<size_t>(H), -0.5f, 0.5f) : rng.uniform(static_cast<size_t>(H), -3.0f, 0.0f);
  p.dt_bias = rng.uniform(static_cast<size_t>(P), -6.0f, c.safe ? -1.0f : 0.0f);
  const std::vector<float> init = rng.normal(static_cast<size_t>(n_slots * H * D * D), 0.3f);
  const KdaInputs x1 = make_kda_inputs(D, H, T, c.in, rng), x2 = make_kda_inputs(D, H, n, c.in, rng);

  std::vector<double> S = to_double(init);
  const std::vector<double> ref1 = host_kda(x1, p, lens, slots, S);
  const std::vector<double> ref2 = host_kda(x2, p, std::vector<int>(lens.size(), 1), slots, S);

  GpuKdaState gen(p, D, H, n_slots, init);
  const GpuKdaInputs g1(x1, c.in), g2(x2, c.in);
  Arena& a = test::arena();
  const DeviceTensor o1 = a.alloc_tensor(c.out, T, P, "o1"), o2 = a.alloc_tensor(c.out, n, P, "o2");
  poison(o1);
  poison(o2);
  kda_recurrent_generic(make_batch(&lens, slots, T), g1.q(), g1.k(), g1.v(), g1.f, g1.b, gen.gate, gen.pool, o1, nullptr);
  kda_recurrent_generic(make_batch(nullptr, slots, n), g2.q(), g2.k(), g2.v(), g2.f, g2.b, gen.gate, gen.pool, o2,
                        nullptr);
  const std::vector<float> out1 = download_f32(o1), out2 = download_f32(o2), st = gen.states();
  expect_close(out1, ref1, out_tol(c.out), l2_tol(c.out), "multi-token call");
  expect_close(out2, ref2, out_tol(c.out), l2_tol(c.out), "one-token call");
  expect_close(st, S, 1e-4, 2e-5, "states");
  const size_t per_slot = static_cast<size_t>(H * D * D);
  EXPECT_TRUE(std::equal(init.begin() + 2 * per_slot, init.begin() + 3 * per_slot, st.begin() + 2 * per_slot))
      << "slot 2 was written";

  if (D != kKdaHeadDim) return;
  GpuKdaState fast(p, D, H, n_slots, init);
  const KdaBatch b1 = make_batch(&lens, slots, T);
  const DeviceTensor f1 = a.alloc_tensor(c.out, T, P, "fast o1"), f2 = a.alloc_tensor(c.out, n, P, "fast o2");
  poison(f1);
  poison(f2);
  void* ws = a.alloc(kda_prefill_workspace_bytes(b1, H), "kda workspace");
  kda_prefill(b1, g1.q(), g1.k(), g1.v(), g1.f, g1.b, fast.gate, fast.pool, ws, f1, nullptr);
  kda_decode(make_batch(nullptr, slots, n), g2.q(), g2.k(), g2.v(), g2.f, g2.b, fast.gate, fast.pool, nullptr,
             DeviceTensor(), 0.0f, f2, nullptr);
  expect_close(download_f32(f1), to_double(out1), 1.0, 2e-5, "kda_prefill vs generic");
  expect_close(download_f32(f2), to_double(out2), 1.0, 2e-5, "kda_decode vs generic");
  expect_close(fast.states(), to_double(st), 1.0, 2e-5, "fast vs generic states");
}

INSTANTIATE_TEST_SUITE_P(Cases, KdaGeneric,
                         ::testing::Values(KdaGenCase{16, 3, true, DType::kF32, DType::kF32},
                                           KdaGenCase{16, 6, false, DType::kBF16, DType::kF32},
                                           KdaGenCase{32, 6, false, DType::kF32, DType::kF32},
                                           KdaGenCase{32, 3, true, DType::kF32, DType::kBF16},
                                           KdaGenCase{64, 3, true, DType::kF32, DType::kF32},
                                           KdaGenCase{64, 6, false, DType::kF32, DType::kF32},
                                           KdaGenCase{72, 3, true, DType::kBF16, DType::kF32},
                                           KdaGenCase{128, 3, true, DType::kF32, DType::kF32},
                                           KdaGenCase{128, 6, false, DType::kF32, DType::kF32}),
                         test::CaseIndexName());

// ---------------------------------------------------------------------------------------------
// Gated RMSNorm

struct NormCase {
  int head_dim;
  int64_t heads, rows;
  DType o, g, y;
};

class KdaGatedNormGeneric : public ::testing::TestWithParam<NormCase> {};

TEST_P(KdaGatedNormGeneric, MatchesHost) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const NormCase c = GetParam();
  const int64_t D = c.head_dim, P = c.heads * D;
  const std::vector<float> o = as_dtype(rng.normal(static_cast<size_t>(c.rows * P), 0.7f), c.o);
  const std::vector<float> g = as_dtype(rng.normal(static_cast<size_t>(c.rows * P), 2.0f), c.g);
  const std::vector<float> w = rng.uniform(static_cast<size_t>(D), 0.5f, 1.5f);
  const float eps = 1e-5f;
  std::vector<double> ref(o.size());
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t base = r * P + h * D;
      double ss = 0;
      for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(o[base + d]) * o[base + d];
      const double rs = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
      for (int64_t d = 0; d < D; ++d) ref[base + d] = o[base + d] * rs * w[d] * sigmoid(g[base + d]);
    }
  }
  Arena& a = test::arena();
  const DeviceTensor d_o = upload_f32(a, o.data(), c.rows, P, c.o, "o");
  const DeviceTensor d_g = upload_f32(a, g.data(), c.rows, P, c.g, "g");
  const DeviceTensor d_w = upload_f32(a, w.data(), 1, D, DType::kF32, "w");
  const DeviceTensor y = a.alloc_tensor(c.y, c.rows, P, "y");
  poison(y);
  kda_gated_rms_norm_generic(d_o, d_g, d_w.as<float>(), c.head_dim, eps, y, nullptr);
  expect_close(download_f32(y), ref, c.y == DType::kBF16 ? 1.0 / 256 : 4e-6, c.y == DType::kBF16 ? 4e-3 : 2e-6,
               "gated norm");
}

INSTANTIATE_TEST_SUITE_P(Cases, KdaGatedNormGeneric,
                         ::testing::Values(NormCase{16, 3, 37, DType::kF32, DType::kF32, DType::kF32},
                                           NormCase{32, 6, 5, DType::kBF16, DType::kBF16, DType::kBF16},
                                           NormCase{40, 3, 9, DType::kF32, DType::kBF16, DType::kF32},
                                           NormCase{64, 6, 20, DType::kBF16, DType::kF32, DType::kF32},
                                           NormCase{128, 3, 33, DType::kF32, DType::kF32, DType::kBF16}),
                         test::CaseIndexName());

// ---------------------------------------------------------------------------------------------
// MLA attention

struct MlaGenCase {
  MlaDims dims;
  bool gate;
  DType in, gate_t, out;
};

struct MlaInputs {
  std::vector<float> q, kv, pe_rows, gate;  // pe_rows [Tkv][8 + rope]: k_pe is a column view at 8
};
constexpr int64_t kPeOffset = 8;

std::vector<double> host_mla(const MlaDims& d, const MlaInputs& x, const std::vector<int>& q_lens,
                             const std::vector<int>& kv_lens, bool gate, float scale) {
  const int64_t H = d.heads, dqk = d.nope + d.rope, ldkv = H * (d.nope + d.v), ldpe = kPeOffset + d.rope;
  std::vector<double> out(static_cast<size_t>(std::accumulate(q_lens.begin(), q_lens.end(), int64_t{0}) * H * d.v));
  int64_t q0 = 0, kv0 = 0;
  for (size_t s = 0; s < q_lens.size(); ++s) {
    const int64_t off = kv_lens[s] - q_lens[s];
    for (int64_t i = 0; i < q_lens[s]; ++i) {
      for (int64_t h = 0; h < H; ++h) {
        const float* qi = x.q.data() + (q0 + i) * H * dqk + h * dqk;
        std::vector<double> p(static_cast<size_t>(off + i + 1));
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= off + i; ++j) {
          const float* kj = x.kv.data() + (kv0 + j) * ldkv + h * (d.nope + d.v);
          const float* pe = x.pe_rows.data() + (kv0 + j) * ldpe + kPeOffset;
          double acc = 0;
          for (int e = 0; e < d.nope; ++e) acc += static_cast<double>(qi[e]) * kj[e];
          for (int e = 0; e < d.rope; ++e) acc += static_cast<double>(qi[d.nope + e]) * pe[e];
          p[j] = acc * scale;
          mx = std::max(mx, p[j]);
        }
        for (double& v : p) sum += (v = std::exp(v - mx));
        double* o = out.data() + (q0 + i) * H * d.v + h * d.v;
        for (int64_t j = 0; j <= off + i; ++j) {
          const float* vj = x.kv.data() + (kv0 + j) * ldkv + h * (d.nope + d.v) + d.nope;
          for (int e = 0; e < d.v; ++e) o[e] += p[j] / sum * vj[e];
        }
        if (gate) {
          for (int e = 0; e < d.v; ++e) o[e] *= sigmoid(x.gate[(q0 + i) * H * d.v + h * d.v + e]);
        }
      }
    }
    q0 += q_lens[s], kv0 += kv_lens[s];
  }
  return out;
}

class MlaGeneric : public ::testing::TestWithParam<MlaGenCase> {};

// Sequences with q_len = kv_len (a first prefill) and q_len < kv_len (continued prefills; one
// query row against 70 keys), several key tiles, query tiles that end mid-way.
TEST_P(MlaGeneric, MatchesHostAttention) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  test::Rng rng;
  SCOPED_TRACE("seed " + std::to_string(rng.seed()));
  const MlaGenCase c = GetParam();
  const MlaDims& d = c.dims;
  const std::vector<int> q_lens = {5, 37, 1, 20, 16}, kv_lens = {5, 77, 70, 100, 16};
  const int64_t H = d.heads, dqk = d.nope + d.rope, Tq = std::accumulate(q_lens.begin(), q_lens.end(), int64_t{0}),
                Tkv = std::accumulate(kv_lens.begin(), kv_lens.end(), int64_t{0});
  const float scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  MlaInputs x;
  x.q = as_dtype(rng.normal(static_cast<size_t>(Tq * H * dqk), 2.0f), c.in);  // scores of a few units
  x.kv = as_dtype(rng.normal(static_cast<size_t>(Tkv * H * (d.nope + d.v)), 1.0f), c.in);
  x.pe_rows = as_dtype(rng.normal(static_cast<size_t>(Tkv * (kPeOffset + d.rope)), 1.0f), c.in);
  x.gate = as_dtype(rng.normal(static_cast<size_t>(Tq * H * d.v), 1.5f), c.gate_t);
  const std::vector<double> ref = host_mla(d, x, q_lens, kv_lens, c.gate, scale);

  Arena& a = test::arena();
  const DeviceTensor dq = upload_f32(a, x.q.data(), Tq, H * dqk, c.in, "q");
  const DeviceTensor dkv = upload_f32(a, x.kv.data(), Tkv, H * (d.nope + d.v), c.in, "kv");
  const DeviceTensor drows = upload_f32(a, x.pe_rows.data(), Tkv, kPeOffset + d.rope, c.in, "pe rows");
  const DeviceTensor dpe = drows.col_slice(kPeOffset, d.rope);
  const DeviceTensor dg = c.gate ? upload_f32(a, x.gate.data(), Tq, H * d.v, c.gate_t, "gate") : DeviceTensor();
  const DeviceTensor cu_q = test::upload_i32(prefix_sums(q_lens), "cu_q"), cu_kv = test::upload_i32(prefix_sums(kv_lens), "cu_kv");
  const int n = static_cast<int>(q_lens.size()), max_q = *std::max_element(q_lens.begin(), q_lens.end());
  const DeviceTensor out = a.alloc_tensor(c.out, Tq, H * d.v, "out");
  poison(out);
  mla_attention_generic(cu_q.as<int32_t>(), cu_kv.as<int32_t>(), n, max_q, d, dq, dkv, dpe, dg, scale, out, nullptr);
  const std::vector<float> got = download_f32(out);
  expect_close(got, ref, out_tol(c.out), l2_tol(c.out), "generic attention");

  const bool fast_geometry = d.nope == kMlaNope && d.rope == kMlaRope && d.v == kMlaV;
  if (!fast_geometry || c.in != DType::kBF16) return;
  const DeviceTensor fo = a.alloc_tensor(c.out, Tq, H * d.v, "fast out");
  poison(fo);
  mla_prefill_attention(cu_q.as<int32_t>(), cu_kv.as<int32_t>(), n, max_q, dq, dkv, dpe, dg, scale, fo, nullptr);
  expect_close(download_f32(fo), to_double(got), 1.0, 1e-2, "mla_prefill_attention vs generic");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MlaGeneric,
    ::testing::Values(MlaGenCase{{3, 32, 16, 32}, true, DType::kF32, DType::kF32, DType::kF32},
                      MlaGenCase{{3, 16, 8, 16}, false, DType::kF32, DType::kF32, DType::kF32},
                      MlaGenCase{{2, 24, 8, 40}, true, DType::kBF16, DType::kBF16, DType::kBF16},
                      MlaGenCase{{3, 128, 64, 128}, true, DType::kBF16, DType::kF32, DType::kF32},
                      MlaGenCase{{2, 128, 64, 128}, false, DType::kBF16, DType::kF32, DType::kBF16},
                      MlaGenCase{{2, 128, 64, 128}, true, DType::kF32, DType::kBF16, DType::kF32}),
    test::CaseIndexName());

// Shapes the kernels refuse, with one-line messages.
TEST(GenericAttention, RefusesBadShapes) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  Arena& a = test::arena();
  KdaStatePool pool;
  pool.heads = 2, pool.head_dim = 160;
  KdaBatch batch;
  batch.n = 1;
  const DeviceTensor t = a.alloc_tensor(DType::kF32, 1, 320, "t"), b = a.alloc_tensor(DType::kF32, 1, 2, "b");
  KdaGate gate;
  EXPECT_THROW(kda_recurrent_generic(batch, t, t, t, t, b, gate, pool, t, nullptr), Error);
  EXPECT_THROW(kda_gated_rms_norm_generic(t, t, nullptr, 96, 1e-5f, t, nullptr), Error);
  const MlaDims dims{1, 130, 8, 16};
  EXPECT_THROW(mla_attention_generic(nullptr, nullptr, 1, 1, dims, t, t, t, DeviceTensor(), 1.0f, t, nullptr), Error);
}

}  // namespace
}  // namespace k3::cuda
