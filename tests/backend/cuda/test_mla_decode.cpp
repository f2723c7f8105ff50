// MLA absorbed decode attention (mla_decode_attention, both kernels) against a float64 reference of
// the same bf16 operands, on the contexts a server holds: ragged lengths within one batch up to 32k
// tokens, pages in shuffled order with NaN in the rows past each length, one sequence alone (B = 1),
// both schedules: balanced ranges across sequence boundaries, and per-sequence ranges that leave a
// short sequence's later ranges empty. Kimi-K3's 96 heads.
//
// Tolerance, relative L2 over all outputs: 1e-2, as the layer test (test_mla.cpp): the operands are
// bf16 on both sides, the GPU rounds the softmax weights P to bf16 (2^-9 relative each) and the
// outputs are convex combinations of the rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/core/upload.h"
#include "cuda_test_util.h"

namespace k3::cuda {
namespace {

constexpr int kPage = 64;

struct Batch {
  int heads = 0;
  std::vector<int32_t> lens;
  std::vector<float> q;          // [B][H·576], on the bf16 grid
  std::vector<float> cache;      // [pages·64][576], on the bf16 grid; NaN past each length
  std::vector<int32_t> table;    // [B][max_pages]
  int max_pages = 0;
  std::vector<double> expected;  // [B][H·512]
};

Batch make_batch(int heads, const std::vector<int32_t>& lens, test::Rng& g) {
  Batch d;
  d.heads = heads, d.lens = lens;
  const int B = static_cast<int>(lens.size());
  int pages = 0;
  for (int32_t len : lens) {
    const int p = (len + kPage - 1) / kPage;
    pages += p, d.max_pages = std::max(d.max_pages, p);
  }
  pages += 3;  // pages nobody owns, in the shuffle too
  d.q = test::round_bf16(g.normal(static_cast<size_t>(B) * heads * kMlaRow, 0.5f));
  d.cache = test::round_bf16(g.normal(static_cast<size_t>(pages) * kPage * kMlaRow, 1.0f));
  std::vector<int32_t> perm(static_cast<size_t>(pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g.gen());
  d.table.assign(static_cast<size_t>(B) * d.max_pages, 0);
  int next = 0;
  for (int b = 0; b < B; ++b) {
    const int p = (lens[static_cast<size_t>(b)] + kPage - 1) / kPage;
    for (int i = 0; i < p; ++i) d.table[static_cast<size_t>(b) * d.max_pages + i] = perm[static_cast<size_t>(next++)];
    const int64_t last = d.table[static_cast<size_t>(b) * d.max_pages + p - 1];
    for (int j = lens[static_cast<size_t>(b)] % kPage; j > 0 && j < kPage; ++j) {
      std::fill_n(d.cache.begin() + (last * kPage + j) * kMlaRow, kMlaRow, std::nanf(""));
    }
  }
  // o[b][h] = Σ_j softmax_j(scale · q·row_j) row_j[:512] in float64, one thread per (b, h) stripe.
  const double scale = 1.0 / std::sqrt(192.0);
  d.expected.assign(static_cast<size_t>(B) * heads * kMlaRank, 0.0);
  auto run = [&](int first, int stride) {
    std::vector<double> s;
    for (int bh = first; bh < B * heads; bh += stride) {
      const int b = bh / heads, h = bh % heads, len = lens[static_cast<size_t>(b)];
      const float* q = d.q.data() + (static_cast<size_t>(b) * heads + h) * kMlaRow;
      auto row = [&](int j) {
        const int64_t page = d.table[static_cast<size_t>(b) * d.max_pages + j / kPage];
        return d.cache.data() + (page * kPage + j % kPage) * kMlaRow;
      };
      s.assign(static_cast<size_t>(len), 0.0);
      double mx = -1e300;
      for (int j = 0; j < len; ++j) {
        const float* r = row(j);
        double acc = 0;
        for (int c = 0; c < kMlaRow; ++c) acc += static_cast<double>(q[c]) * r[c];
        s[static_cast<size_t>(j)] = acc * scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      double sum = 0;
      double* o = d.expected.data() + (static_cast<size_t>(b) * heads + h) * kMlaRank;
      for (int j = 0; j < len; ++j) {
        const double p = std::exp(s[static_cast<size_t>(j)] - mx);
        sum += p;
        const float* r = row(j);
        for (int c = 0; c < kMlaRank; ++c) o[c] += p * r[c];
      }
      for (int c = 0; c < kMlaRank; ++c) o[c] /= sum;
    }
  };
  const int threads = static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(run, i, threads);
  for (std::thread& th : pool) th.join();
  return d;
}

// Sequences [first, first + n) of the batch through the GPU kernel; their o_lat rows.
std::vector<float> gpu_decode(const Batch& d, int first, int n, MlaDecodeKernel kernel, MlaDecodeSchedule schedule,
                              int ranges = 0, bool chained = true) {
  Arena& a = test::arena();
  const DeviceTensor cache = upload_f32(a, d.cache.data(), static_cast<int64_t>(d.cache.size() / kMlaRow), kMlaRow,
                                        DType::kBF16, "cache");
  const DeviceTensor q = upload_f32(a, d.q.data() + static_cast<size_t>(first) * d.heads * kMlaRow, n,
                                    static_cast<int64_t>(d.heads) * kMlaRow, DType::kBF16, "q_abs");
  const std::vector<int32_t> table(d.table.begin() + static_cast<ptrdiff_t>(first) * d.max_pages,
                                   d.table.begin() + static_cast<ptrdiff_t>(first + n) * d.max_pages);
  const std::vector<int32_t> lens(d.lens.begin() + first, d.lens.begin() + first + n);
  const DeviceTensor dtable = test::upload_i32(table, "block table");
  const DeviceTensor dlens = test::upload_i32(lens, "seqlens");
  const int max_len = *std::max_element(lens.begin(), lens.end());
  MlaDecodePlan plan = mla_decode_plan(n, d.heads, max_len, list_devices().at(0).multiprocessors, kernel, schedule, ranges);
  plan.chained = chained;
  void* ws = a.alloc(mla_decode_workspace_bytes(plan, n, d.heads), "mla ws");
  const DeviceTensor o_lat = a.alloc_tensor(DType::kF32, n, static_cast<int64_t>(d.heads) * kMlaRank, "o_lat");
  poison(o_lat);
  MlaPagedCache pc;
  pc.rows = cache.data, pc.num_rows = cache.rows, pc.page_size = kPage;
  pc.block_table = dtable.as<int32_t>(), pc.block_table_ld = d.max_pages;
  mla_decode_attention(q, pc, dlens.as<int32_t>(), n, 1.0f / std::sqrt(192.0f), plan, ws, o_lat, nullptr);
  return download_f32(o_lat);
}

void expect_close(const std::vector<float>& got, const Batch& d, int first, int n, const std::string& what) {
  const size_t width = static_cast<size_t>(d.heads) * kMlaRank;
  const std::vector<double> want(d.expected.begin() + static_cast<ptrdiff_t>(first * width),
                                 d.expected.begin() + static_cast<ptrdiff_t>((first + n) * width));
  ASSERT_EQ(got.size(), want.size()) << what;
  const test::ErrorStats s = test::compare(got, want);
  std::printf("[ error  ] %-44s rel_l2 %.2e max_abs %.2e\n", what.c_str(), s.rel_l2, s.max_abs);
  EXPECT_EQ(s.non_finite, 0) << what;
  EXPECT_LT(s.rel_l2, 1e-2) << what;
  EXPECT_GT(s.ref_rms, 1e-3) << what << ": the reference is (nearly) zero";
}

TEST(MlaDecodeLong, RaggedContextsUpTo32kMatchFloat64) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  const uint64_t seed = test::seed_or(7700);
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Rng g(seed);
  const Batch d = make_batch(96, {1, 63, 64, 65, 4097, 32768}, g);
  const int B = static_cast<int>(d.lens.size());
  constexpr MlaDecodeKernel kWgmma = MlaDecodeKernel::kWgmma, kMma = MlaDecodeKernel::kMma;
  constexpr MlaDecodeSchedule kBalanced = MlaDecodeSchedule::kBalanced, kPerSeq = MlaDecodeSchedule::kPerSequence,
                              kAdaptive = MlaDecodeSchedule::kAdaptive;
  struct Run {
    MlaDecodeKernel kernel;
    MlaDecodeSchedule schedule;
    int ranges;
    const char* name;
  };
  // 582 tiles: the planned balanced ranges (about 9 tiles each) split the 32k sequence over most of
  // them; 5 and 97 balanced ranges put boundaries inside the short sequences too.
  for (const Run& r : {Run{kWgmma, kAdaptive, 0, "wgmma, adaptive"}, Run{kWgmma, kBalanced, 0, "wgmma, balanced"}, Run{kWgmma, kBalanced, 5, "wgmma, 5 balanced ranges"},
                       Run{kWgmma, kBalanced, 97, "wgmma, 97 balanced ranges"},
                       Run{kWgmma, kPerSeq, 1, "wgmma, one range per sequence"},
                       Run{kWgmma, kPerSeq, 5, "wgmma, 5 ranges per sequence"}, Run{kMma, kPerSeq, 0, "mma.sync"},
                       Run{kMma, kPerSeq, 5, "mma.sync, 5 ranges per sequence"}}) {
    test::ArenaScope run_scope;
    expect_close(gpu_decode(d, 0, B, r.kernel, r.schedule, r.ranges), d, 0, B,
                 std::string("H 96, 6 ragged sequences, ") + r.name);
  }
  // The 32k sequence alone (B = 1), with the ranges the plan chooses for it.
  for (MlaDecodeKernel k : {kWgmma, kMma}) {
    test::ArenaScope run_scope;
    expect_close(gpu_decode(d, B - 1, 1, k, MlaDecodeSchedule::kAuto), d, B - 1, 1,
                 std::string("H 96, B 1, 32768 tokens, ") + (k == kWgmma ? "wgmma" : "mma.sync"));
  }
}

// Chained (programmatic dependent) launches of the decode and the combine give the plain launches'
// results bit for bit, for both kernels and every schedule.
TEST(MlaDecodeLong, ChainedLaunchesMatchPlainOnesBitForBit) {
  K3_REQUIRE_GPU();
  test::ArenaScope scope;
  const uint64_t seed = test::seed_or(7701);
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Rng g(seed);
  const Batch d = make_batch(96, {1, 65, 4097, 777, 2048}, g);
  const int B = static_cast<int>(d.lens.size());
  for (const auto& [kernel, schedule] : {std::pair{MlaDecodeKernel::kWgmma, MlaDecodeSchedule::kAdaptive},
                                         std::pair{MlaDecodeKernel::kWgmma, MlaDecodeSchedule::kBalanced},
                                         std::pair{MlaDecodeKernel::kWgmma, MlaDecodeSchedule::kPerSequence},
                                         std::pair{MlaDecodeKernel::kMma, MlaDecodeSchedule::kPerSequence}}) {
    test::ArenaScope run_scope;
    const std::vector<float> chained = gpu_decode(d, 0, B, kernel, schedule, 0, true);
    const std::vector<float> plain = gpu_decode(d, 0, B, kernel, schedule, 0, false);
    ASSERT_EQ(chained.size(), plain.size());
    EXPECT_EQ(std::memcmp(chained.data(), plain.data(), chained.size() * sizeof(float)), 0)
        << "kernel " << static_cast<int>(kernel) << ", schedule " << static_cast<int>(schedule);
    expect_close(chained, d, 0, B, "H 96, 5 ragged sequences, chained launches");
  }
}

}  // namespace
}  // namespace k3::cuda
