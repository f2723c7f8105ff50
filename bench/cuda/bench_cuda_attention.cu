// Attention-kernel benchmark of the CUDA backend (KDA and MLA): one binary, one table per
// kernel family, CUDA events around each call, warm-up first, the median of --reps calls. Inputs
// are random (never zeros), generated on the device. Figures are compared with:
//   - HBM: the device-to-device copy rate measured at start (read + write bytes), and the
//     3.83 TB/s read ceiling for the H200;
//   - KDA prefill: FlashKDA's published 279 µs for T = 2048, H = 12, D = 128 on an H100;
//   - MLA decode: FlashMLA's ~90 % of HBM bandwidth (H800) in its memory-bound configurations.
// Working sets smaller than 4× the 60 MB L2 rotate over disjoint copies, so each call reads cold
// data.
//
// Run: k3_bench_cuda_attention [--reps N] [--quick] [--profile] [--no-bulk] [--kda-prefill]
// --profile: one untimed call of every variant of one case per table, for a profiler (ncu).
// --kda-prefill: the KDA prefill table only.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/device.h"
#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/attention/kda/kda_internal.h"
#include "backend/cuda/attention/kda/kda_tuning.h"
#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/core/stream.h"
#include "backend/cuda/core/upload.h"
#include "bench_cuda_util.h"

namespace k3::cuda {
namespace {

using bench::kReadCeilingTBs;
constexpr double kFlashKdaUs = 279.0;  // T=2048, H=12, D=128, H100 (published)
constexpr size_t kRotateBytes = size_t{256} << 20;

using bench::g_reps;
bool g_quick = false;
bool g_profile = false;  // one call per kernel variant of one case per table (for ncu)
bool g_bulk = true;      // time the bulk-copy (TMA) kernels (the KDA variants, the MLA decode)
bool g_kda_prefill_only = false;
bool g_mla_decode_only = false;

__device__ __forceinline__ uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// ≈ N(mean, sd²) from the sum of four uniforms (Irwin–Hall), enough for timing data.
__device__ __forceinline__ float rnd(uint64_t seed, size_t i, float mean, float sd) {
  const uint64_t h = splitmix(seed * 0x100000001B3ull ^ i);
  float s = 0.0f;
  for (int k = 0; k < 4; ++k) s += static_cast<float>((h >> (16 * k)) & 0xFFFF) * (1.0f / 65536.0f);
  return mean + sd * (s - 2.0f) * 1.7320508f;
}
__global__ void fill_bf16_kernel(__nv_bfloat16* p, size_t n, uint64_t seed, float mean, float sd) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16_rn(rnd(seed, i, mean, sd));
}
__global__ void fill_f32_kernel(float* p, size_t n, uint64_t seed, float mean, float sd) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = rnd(seed, i, mean, sd);
}
void fill(const DeviceTensor& t, uint64_t seed, float mean = 0.0f, float sd = 1.0f) {
  const size_t n = t.bytes() / dtype_size(t.dtype);
  if (t.dtype == DType::kBF16) {
    fill_bf16_kernel<<<1024, 256>>>(t.as<__nv_bfloat16>(), n, seed, mean, sd);
  } else {
    fill_f32_kernel<<<1024, 256>>>(t.as<float>(), n, seed, mean, sd);
  }
  K3_CUDA_CHECK_LAUNCH("fill");
}
void fill_f32(float* p, size_t n, uint64_t seed, float mean, float sd) {
  fill_f32_kernel<<<1024, 256>>>(p, n, seed, mean, sd);
  K3_CUDA_CHECK_LAUNCH("fill");
}

// bench::time_ms, or with --profile one untimed call per kernel variant.
double time_ms(cudaStream_t stream, const std::function<void(int)>& fn) {
  if (g_profile) {
    fn(0);
    K3_CUDA_CHECK(cudaStreamSynchronize(stream));
    return 1.0;
  }
  return bench::time_ms(stream, fn);
}

DeviceTensor upload_i32(Arena& a, const std::vector<int32_t>& v, const char* what) {
  DeviceTensor t = a.alloc_tensor(DType::kI32, 1, static_cast<int64_t>(v.size()), what);
  copy_bytes_to_device(t.data, v.data(), v.size() * sizeof(int32_t));
  return t;
}

double g_copy_tbs = 0;

void bench_copy(Arena& arena, Stream& stream) {
  const size_t mark = arena.mark();
  const size_t bytes = size_t{2} << 30;
  void* a = arena.alloc(bytes, "copy src");
  void* b = arena.alloc(bytes, "copy dst");
  fill_f32(static_cast<float*>(a), bytes / 4, 1, 0.0f, 1.0f);
  const double ms = time_ms(stream, [&](int) { K3_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); });
  g_copy_tbs = 2.0 * bytes / (ms * 1e-3) / 1e12;
  std::printf("device-to-device copy 2 GiB: %.2f TB/s (read + write); issue read ceiling %.2f TB/s\n", g_copy_tbs,
              kReadCeilingTBs);
  arena.reset(mark);
}

// ---- KDA prefill -----------------------------------------------------------------------------
void bench_kda_prefill(Arena& arena, Stream& stream) {
  std::printf("\n== KDA chunked prefill, one sequence, D = 128, bf16 q/k/v/f/b in, bf16 o out, fp32 state ==\n");
  std::printf("   intra = gates + norms + in-chunk WY (SIMT fp32); inter = sequential chunk pass (kda_prefill − intra):\n"
              "   16 / 32 state columns per CTA (bulk copies), the default columns with 16-byte cp.async;\n"
              "   total = kda_prefill with bulk copies and the default columns\n");
  std::printf("%6s %4s | %8s | %8s %8s %8s | %9s %7s | %8s %8s\n", "T", "H", "intra us", "cols16", "cols32",
              "cp.async", "total us", "TF/s", "conv us", "norm us");
  struct Case {
    int T, H;
  };
  std::vector<Case> cases = {{2048, 12}, {2048, 32}, {2048, 96}, {8192, 12}, {8192, 32}, {8192, 96}};
  if (g_quick) cases = {{2048, 12}, {8192, 32}};
  if (g_profile) cases = {{2048, 96}};
  for (const Case& c : cases) {
    const size_t mark = arena.mark();
    const int64_t T = c.T, H = c.H, P = H * kKdaHeadDim;
    KdaStatePool pool;
    pool.slots = 1, pool.heads = H, pool.head_dim = kKdaHeadDim, pool.conv_width = 4;
    pool.recurrent = arena.alloc_n<float>(pool.recurrent_floats_per_slot(), "state");
    pool.conv = arena.alloc_n<float>(pool.conv_floats_per_slot(), "conv state");
    fill_f32(pool.recurrent, pool.recurrent_floats_per_slot(), 2, 0.0f, 0.01f);
    fill_f32(pool.conv, pool.conv_floats_per_slot(), 3, 0.0f, 1.0f);
    const DeviceTensor x = arena.alloc_tensor(DType::kBF16, T, 3 * P, "qkv~");
    const DeviceTensor y = arena.alloc_tensor(DType::kBF16, T, 3 * P, "qkv");
    const DeviceTensor f = arena.alloc_tensor(DType::kBF16, T, P, "f");
    const DeviceTensor b = arena.alloc_tensor(DType::kBF16, T, H, "b");
    const DeviceTensor g = arena.alloc_tensor(DType::kBF16, T, P, "g");
    const DeviceTensor o = arena.alloc_tensor(DType::kBF16, T, P, "o");
    const DeviceTensor out = arena.alloc_tensor(DType::kBF16, T, P, "y");
    const DeviceTensor conv_w = arena.alloc_tensor(DType::kF32, 3 * P, 4, "conv w");
    const DeviceTensor a_log = arena.alloc_tensor(DType::kF32, 1, H, "a_log");
    const DeviceTensor dt = arena.alloc_tensor(DType::kF32, 1, P, "dt");
    const DeviceTensor onorm = arena.alloc_tensor(DType::kF32, 1, kKdaHeadDim, "o_norm");
    fill(x, 4), fill(y, 5), fill(f, 6), fill(b, 7), fill(g, 8), fill(conv_w, 9, 0.0f, 0.5f), fill(a_log, 10, 0.0f, 0.3f);
    fill(dt, 11, -3.0f, 1.0f), fill(onorm, 12, 1.0f, 0.1f);
    KdaBatch batch;
    batch.cu_seqlens = upload_i32(arena, {0, c.T}, "cu").as<int32_t>();
    batch.slots = upload_i32(arena, {0}, "slots").as<int32_t>();
    batch.n = 1, batch.max_len = c.T, batch.total_rows = T;
    void* ws = arena.alloc(kda_prefill_workspace_bytes(batch, H), "ws");
    KdaGate gate;
    gate.safe = true, gate.lower_bound = -5.0f, gate.a_log = a_log.as<float>(), gate.dt_bias = dt.as<float>();
    const DeviceTensor q = y.col_slice(0, P), k = y.col_slice(P, P), v = y.col_slice(2 * P, P);
    kda_detail::PrefillArgs pa{batch, q.data, q.ld, k.data, k.ld, v.data, v.ld, f.data, f.ld, b.data, b.ld, gate,
                               1.0f / std::sqrt(128.0f), static_cast<int>(H), pool.recurrent,
                               static_cast<float*>(ws), o.data, o.ld};
    const double intra = time_ms(stream, [&](int) { kda_detail::launch_chunk_intra(pa, true, stream); });
    auto prefill = [&](KdaLoads loads, KdaInterCols cols) {
      return time_ms(stream, [&](int) { kda_prefill(batch, q, k, v, f, b, gate, pool, ws, o, stream, loads, cols); });
    };
    const KdaLoads dflt = g_bulk ? KdaLoads::kBulk : KdaLoads::kCpAsync;
    const double inter[3] = {prefill(dflt, KdaInterCols::k16) - intra, prefill(dflt, KdaInterCols::k32) - intra,
                             prefill(KdaLoads::kCpAsync, KdaInterCols::kAuto) - intra};
    const double total = prefill(dflt, KdaInterCols::kAuto);
    const double conv = time_ms(stream, [&](int) { kda_short_conv(batch, x, conv_w.as<float>(), pool, y, stream); });
    const double norm = time_ms(stream, [&](int) { kda_gated_rms_norm(o, g, onorm.as<float>(), 1e-5f, out, stream); });
    // FLOPs per (chunk, head): intra A/Aqk 2·2·(C(C+1)/2)·D + solve 2·(C(C−1)/2)·2D; inter 6·C·D² + C²·D.
    const double C = 64, D = 128, chunks = std::ceil(T / C);
    const double flop = chunks * H * (4 * (C * (C + 1) / 2) * D + 2 * (C * (C - 1) / 2) * 2 * D + 6 * C * D * D + C * C * D);
    std::printf("%6d %4d | %8.1f | %8.1f %8.1f %8.1f | %9.1f %7.1f | %8.1f %8.1f\n", c.T, c.H, intra * 1e3,
                inter[0] * 1e3, inter[1] * 1e3, inter[2] * 1e3, total * 1e3, flop / (total * 1e-3) / 1e12,
                conv * 1e3, norm * 1e3);
    if (c.T == 2048 && c.H == 12) std::printf("   FlashKDA (H100, published): %.0f us; ours %.1f us\n", kFlashKdaUs, total * 1e3);
    std::fflush(stdout);
    K3_CUDA_CHECK(cudaDeviceSynchronize());
    arena.reset(mark);
  }
}

// ---- KDA decode ------------------------------------------------------------------------------
void bench_kda_decode(Arena& arena, Stream& stream) {
  std::printf("\n== KDA fused decode step (gates, norms, delta rule, gated RMSNorm), H = 96, D = 128, bf16 in/out ==\n");
  std::printf("   bytes = fp32 state read + written (B·H·128·128·4·2) + activations; states rotate over >= 256 MiB\n");
  std::printf("%5s | %9s %9s %8s %7s %7s | %9s\n", "B", "MB", "us", "GB/s", "%3.83", "%copy", "conv us");
  std::vector<int> bs = {1, 8, 64, 256};
  if (g_quick) bs = {1, 64};
  if (g_profile) bs = {64};
  const int64_t H = 96, P = H * kKdaHeadDim;
  for (int B : bs) {
    const size_t mark = arena.mark();
    const size_t state_bytes = static_cast<size_t>(B) * H * 128 * 128 * 4;
    const int copies = static_cast<int>(std::max<size_t>(1, (kRotateBytes + state_bytes - 1) / state_bytes));
    KdaStatePool pool;
    pool.slots = static_cast<int64_t>(B) * copies, pool.heads = H, pool.head_dim = kKdaHeadDim, pool.conv_width = 4;
    pool.recurrent = arena.alloc_n<float>(pool.recurrent_floats_per_slot() * pool.slots, "state");
    pool.conv = arena.alloc_n<float>(pool.conv_floats_per_slot() * pool.slots, "conv");
    fill_f32(pool.recurrent, pool.recurrent_floats_per_slot() * pool.slots, 2, 0.0f, 0.01f);
    fill_f32(pool.conv, pool.conv_floats_per_slot() * pool.slots, 3, 0.0f, 1.0f);
    std::vector<DeviceTensor> slot_sets;
    for (int cpy = 0; cpy < copies; ++cpy) {
      std::vector<int32_t> s(static_cast<size_t>(B));
      std::iota(s.begin(), s.end(), cpy * B);
      slot_sets.push_back(upload_i32(arena, s, "slots"));
    }
    const DeviceTensor x = arena.alloc_tensor(DType::kBF16, B, 3 * P, "qkv~");
    const DeviceTensor y = arena.alloc_tensor(DType::kBF16, B, 3 * P, "qkv");
    const DeviceTensor f = arena.alloc_tensor(DType::kBF16, B, P, "f");
    const DeviceTensor bb = arena.alloc_tensor(DType::kBF16, B, H, "b");
    const DeviceTensor g = arena.alloc_tensor(DType::kBF16, B, P, "g");
    const DeviceTensor out = arena.alloc_tensor(DType::kBF16, B, P, "out");
    const DeviceTensor conv_w = arena.alloc_tensor(DType::kF32, 3 * P, 4, "conv w");
    const DeviceTensor a_log = arena.alloc_tensor(DType::kF32, 1, H, "a_log");
    const DeviceTensor dt = arena.alloc_tensor(DType::kF32, 1, P, "dt");
    const DeviceTensor onorm = arena.alloc_tensor(DType::kF32, 1, kKdaHeadDim, "o_norm");
    fill(x, 4), fill(y, 5), fill(f, 6), fill(bb, 7), fill(g, 8), fill(conv_w, 9, 0.0f, 0.5f), fill(a_log, 10, 0.0f, 0.3f);
    fill(dt, 11, -3.0f, 1.0f), fill(onorm, 12, 1.0f, 0.1f);
    KdaGate gate;
    gate.safe = true, gate.lower_bound = -5.0f, gate.a_log = a_log.as<float>(), gate.dt_bias = dt.as<float>();
    auto batch_of = [&](int i) {
      KdaBatch batch;
      batch.slots = slot_sets[static_cast<size_t>(i % copies)].as<int32_t>();
      batch.n = B, batch.max_len = 1, batch.total_rows = B;
      return batch;
    };
    const double ms = time_ms(stream, [&](int i) {
      kda_decode(batch_of(i), y.col_slice(0, P), y.col_slice(P, P), y.col_slice(2 * P, P), f, bb, gate, pool,
                 onorm.as<float>(), g, 1e-5f, out, stream);
    });
    const double conv = time_ms(stream, [&](int i) { kda_short_conv(batch_of(i), x, conv_w.as<float>(), pool, y, stream); });
    const double bytes = 2.0 * state_bytes + static_cast<double>(B) * (5 * P + H) * 2 + static_cast<double>(B) * P * 2;
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("%5d | %9.1f %9.1f %8.0f %6.0f%% %6.0f%% | %9.1f\n", B, bytes / 1e6, ms * 1e3, gbs,
                100.0 * gbs / (kReadCeilingTBs * 1e3), 100.0 * gbs / (g_copy_tbs * 1e3), conv * 1e3);
    std::fflush(stdout);
    K3_CUDA_CHECK(cudaDeviceSynchronize());
    arena.reset(mark);
  }
}

// ---- MLA decode ------------------------------------------------------------------------------
// The context lengths of a case: all `ctx`, or ragged — one sequence of `ctx` and the rest of ctx/32
// (a long request among short ones), or ctx, ctx/2, …, ctx/32 repeated.
enum class Lengths { kUniform, kOneLong, kHalving };

std::vector<int32_t> case_lengths(Lengths kind, int B, int ctx) {
  std::vector<int32_t> lens(static_cast<size_t>(B), ctx);
  for (int b = 0; b < B; ++b) {
    if (kind == Lengths::kOneLong && b > 0) lens[static_cast<size_t>(b)] = ctx / 32;
    if (kind == Lengths::kHalving) lens[static_cast<size_t>(b)] = ctx >> (b % 6);
  }
  return lens;
}

void bench_mla_decode(Arena& arena, Stream& stream, int sms) {
  std::printf("\n== MLA absorbed decode attention over the paged bf16 latent cache (576/512, page 64), ranges + combine ==\n");
  if (!g_bulk) {
    std::printf("   skipped (--no-bulk: the decode kernel loads its tiles with bulk copies)\n");
    return;
  }
  std::printf("   bytes = cache rows read (Σ ctx · 1152); FLOP = Σ ctx · H · (576+512) · 2; H = 96 is K3 on one GPU;\n"
              "   lengths: uniform, 1long (one at ctx, the rest ctx/32), halving (ctx, ctx/2 … ctx/32); variants in\n"
              "   interleaved rounds: mma.sync and wgmma with per-sequence ranges (splits), wgmma with balanced\n"
              "   ranges, wgmma adaptive (per call, the faster of the two by the cost model: ranges balanced/splits);\n"
              "   all with chained (programmatic dependent) launches but 'adapt plain', adaptive in plain stream order\n");
  std::printf("%4s %5s %6s %-8s | %-12s %6s | %8s | %8s | %7s %6s %6s %6s | %9s %9s\n", "H", "B", "ctx", "lengths",
              "variant", "ranges", "MB", "us", "GB/s", "%3.83", "%copy", "TF/s", "absorb us", "unabs us");
  struct Case {
    int H, B, ctx;
    Lengths lengths = Lengths::kUniform;
  };
  std::vector<Case> cases;
  for (int H : {96, 16}) {
    for (int B : {1, 8, 64}) {
      for (int ctx : {4096, 32768}) cases.push_back({H, B, ctx});
    }
  }
  for (int H : {24, 32, 48, 64}) cases.push_back({H, 64, 32768});
  for (int H : {96, 16}) {
    cases.push_back({H, 64, 32768, Lengths::kOneLong});
    cases.push_back({H, 64, 32768, Lengths::kHalving});
  }
  if (g_quick) cases = {{96, 1, 4096}, {96, 64, 32768}, {16, 64, 32768}, {96, 64, 32768, Lengths::kOneLong}};
  if (g_profile) cases = {{96, 64, 32768}, {16, 64, 32768}};
  struct Variant {
    const char* name;
    MlaDecodeKernel kernel;
    MlaDecodeSchedule schedule;
    bool chained = true;
  };
  const Variant variants[] = {{"mma", MlaDecodeKernel::kMma, MlaDecodeSchedule::kPerSequence},
                              {"wgmma perseq", MlaDecodeKernel::kWgmma, MlaDecodeSchedule::kPerSequence},
                              {"wgmma bal", MlaDecodeKernel::kWgmma, MlaDecodeSchedule::kBalanced},
                              {"wgmma adapt", MlaDecodeKernel::kWgmma, MlaDecodeSchedule::kAdaptive},
                              {"adapt plain", MlaDecodeKernel::kWgmma, MlaDecodeSchedule::kAdaptive, false}};
  constexpr int kVariants = 5;
  for (const Case& c : cases) {
    const size_t mark = arena.mark();
    const int page = 64;
    const int pages_per_seq = c.ctx / page;
    const std::vector<int32_t> host_lens = case_lengths(c.lengths, c.B, c.ctx);
    const double tokens = std::accumulate(host_lens.begin(), host_lens.end(), 0.0);
    const size_t cache_bytes = static_cast<size_t>(c.B) * c.ctx * kMlaRow * 2;  // allocated: every sequence at ctx
    const int copies = static_cast<int>(std::max<size_t>(1, (kRotateBytes + cache_bytes - 1) / cache_bytes));
    const int64_t pages = static_cast<int64_t>(c.B) * pages_per_seq * copies;
    const DeviceTensor cache = arena.alloc_tensor(DType::kBF16, pages * page, kMlaRow, "cache");
    fill(cache, 21, 0.0f, 1.0f);
    std::vector<DeviceTensor> tables;
    std::mt19937 gen(5);
    for (int cpy = 0; cpy < copies; ++cpy) {
      std::vector<int32_t> t(static_cast<size_t>(c.B) * pages_per_seq);
      std::iota(t.begin(), t.end(), cpy * c.B * pages_per_seq);
      std::shuffle(t.begin(), t.end(), gen);
      tables.push_back(upload_i32(arena, t, "block table"));
    }
    const DeviceTensor lens = upload_i32(arena, host_lens, "lens");
    const DeviceTensor q = arena.alloc_tensor(DType::kBF16, c.B, c.H * kMlaQk, "q");
    const DeviceTensor q_abs = arena.alloc_tensor(DType::kBF16, c.B, c.H * kMlaRow, "q_abs");
    const DeviceTensor w_uk = arena.alloc_tensor(DType::kBF16, c.H * kMlaNope, kMlaRank, "w_uk");
    const DeviceTensor w_uv = arena.alloc_tensor(DType::kBF16, c.H * kMlaV, kMlaRank, "w_uv");
    const DeviceTensor gate = arena.alloc_tensor(DType::kBF16, c.B, c.H * kMlaV, "gate");
    const DeviceTensor o_lat = arena.alloc_tensor(DType::kF32, c.B, c.H * kMlaRank, "o_lat");
    const DeviceTensor out = arena.alloc_tensor(DType::kBF16, c.B, c.H * kMlaV, "out");
    fill(q, 22), fill(q_abs, 23, 0.0f, 0.3f), fill(w_uk, 24, 0.0f, 0.05f), fill(w_uv, 25, 0.0f, 0.05f), fill(gate, 26);
    MlaDecodePlan plans[kVariants];
    void* ws[kVariants];
    std::vector<std::pair<const char*, std::function<void(int)>>> fns;
    for (int k = 0; k < kVariants; ++k) {
      plans[k] = mla_decode_plan(c.B, c.H, c.ctx, sms, variants[k].kernel, variants[k].schedule);
      plans[k].chained = variants[k].chained;
      ws[k] = arena.alloc(mla_decode_workspace_bytes(plans[k], c.B, c.H), "ws");
      fns.emplace_back(variants[k].name, [&, k](int i) {
        MlaPagedCache pc;
        pc.rows = cache.data, pc.num_rows = cache.rows, pc.page_size = page;
        pc.block_table = tables[static_cast<size_t>(i % copies)].as<int32_t>(), pc.block_table_ld = pages_per_seq;
        mla_decode_attention(q_abs, pc, lens.as<int32_t>(), c.B, 1.0f / std::sqrt(192.0f), plans[k], ws[k], o_lat, stream);
      });
    }
    std::vector<double> ms(kVariants, 1.0);
    if (g_profile) {
      for (auto& f : fns) f.second(0);
      K3_CUDA_CHECK(cudaStreamSynchronize(stream));
    } else {
      ms = bench::time_interleaved(stream, fns);
    }
    const double absorb = time_ms(stream, [&](int) { mla_absorb_q(q, w_uk, q_abs, stream); });
    const double unabs = time_ms(stream, [&](int) { mla_unabsorb_o(o_lat, w_uv, gate, out, stream); });
    const double bytes = tokens * kMlaRow * 2;
    const double flop = 2.0 * tokens * c.H * (kMlaRow + kMlaRank);
    const char* kind = c.lengths == Lengths::kUniform ? "uniform" : c.lengths == Lengths::kOneLong ? "1long" : "halving";
    for (int k = 0; k < kVariants; ++k) {
      const double gbs = bytes / (ms[k] * 1e-3) / 1e9;
      const MlaDecodePlan& p = plans[k];
      const std::string ranges = p.schedule == MlaDecodeSchedule::kBalanced       ? std::to_string(p.balanced_ranges)
                                 : p.schedule == MlaDecodeSchedule::kPerSequence ? std::to_string(p.splits)
                                                                                 : std::to_string(p.balanced_ranges) + "/" +
                                                                                       std::to_string(p.splits);
      std::printf("%4d %5d %6d %-8s | %-12s %6s | %8.1f | %8.1f | %7.0f %5.0f%% %5.0f%% %6.1f | %9.1f %9.1f\n", c.H, c.B,
                  c.ctx, kind, fns[k].first, ranges.c_str(), bytes / 1e6, ms[k] * 1e3, gbs,
                  100.0 * gbs / (kReadCeilingTBs * 1e3), 100.0 * gbs / (g_copy_tbs * 1e3), flop / (ms[k] * 1e-3) / 1e12,
                  absorb * 1e3, unabs * 1e3);
    }
    std::fflush(stdout);
    K3_CUDA_CHECK(cudaDeviceSynchronize());
    arena.reset(mark);
  }
}

// ---- MLA prefill -----------------------------------------------------------------------------
void bench_mla_prefill(Arena& arena, Stream& stream) {
  std::printf("\n== MLA prefill attention (causal, NoPE, d_qk 192 / d_v 128, output gate), one sequence ==\n");
  std::printf("%6s %4s | %9s %8s\n", "T", "H", "us", "TF/s");
  struct Case {
    int T, H;
  };
  std::vector<Case> cases = {{2048, 96}, {8192, 96}};
  if (g_quick || g_profile) cases = {{2048, 96}};
  for (const Case& c : cases) {
    const size_t mark = arena.mark();
    const DeviceTensor q = arena.alloc_tensor(DType::kBF16, c.T, c.H * kMlaQk, "q");
    const DeviceTensor kv = arena.alloc_tensor(DType::kBF16, c.T, c.H * 256, "kv");
    const DeviceTensor rows = arena.alloc_tensor(DType::kBF16, c.T, kMlaRow, "rows");
    const DeviceTensor gate = arena.alloc_tensor(DType::kBF16, c.T, c.H * kMlaV, "gate");
    const DeviceTensor out = arena.alloc_tensor(DType::kBF16, c.T, c.H * kMlaV, "out");
    fill(q, 31), fill(kv, 32), fill(rows, 33), fill(gate, 34);
    const DeviceTensor cu = upload_i32(arena, {0, c.T}, "cu");
    const double ms = time_ms(stream, [&](int) {
      mla_prefill_attention(cu.as<int32_t>(), cu.as<int32_t>(), 1, c.T, q, kv, rows.col_slice(kMlaRank, kMlaRope), gate,
                            1.0f / std::sqrt(192.0f), out, stream);
    });
    const double flop = 2.0 * c.H * (static_cast<double>(c.T) * (c.T + 1) / 2) * (kMlaQk + kMlaV);
    std::printf("%6d %4d | %9.1f %8.1f\n", c.T, c.H, ms * 1e3, flop / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
    K3_CUDA_CHECK(cudaDeviceSynchronize());
    arena.reset(mark);
  }
}

}  // namespace
}  // namespace k3::cuda

int main(int argc, char** argv) {
  using namespace k3::cuda;
  bench::g_reps = 20;  // this binary's default --reps
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      g_reps = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      g_quick = true;
    } else if (std::strcmp(argv[i], "--profile") == 0) {
      g_profile = true;
    } else if (std::strcmp(argv[i], "--no-bulk") == 0) {
      g_bulk = false;
    } else if (std::strcmp(argv[i], "--kda-prefill") == 0) {
      g_kda_prefill_only = true;
    } else if (std::strcmp(argv[i], "--mla-decode") == 0) {
      g_mla_decode_only = true;
    } else {
      std::fprintf(stderr,
                   "usage: k3_bench_cuda_attention [--reps N] [--quick] [--profile] [--no-bulk] [--kda-prefill | --mla-decode]\n");
      return 2;
    }
  }
  try {
    const auto devices = list_devices();
    if (devices.empty()) {
      std::printf("no CUDA device: nothing to measure\n");
      return 0;
    }
    std::printf("device: %s, %d SMs; median of %d calls after 3 warm-ups\n", devices[0].name.c_str(),
                devices[0].multiprocessors, g_reps);
    size_t free_b = 0, total_b = 0;
    K3_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    Arena arena(0, std::min<size_t>(free_b - (size_t{2} << 30), static_cast<size_t>(g_profile ? 8 : 24) << 30));
    Stream stream;
    if (g_kda_prefill_only) {
      bench_kda_prefill(arena, stream);
      return 0;
    }
    bench_copy(arena, stream);
    if (g_mla_decode_only) {
      bench_mla_decode(arena, stream, devices[0].multiprocessors);
      return 0;
    }
    bench_kda_prefill(arena, stream);
    bench_kda_decode(arena, stream);
    bench_mla_decode(arena, stream, devices[0].multiprocessors);
    bench_mla_prefill(arena, stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3_bench_cuda_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
