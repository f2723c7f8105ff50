// CUDA backend benchmark: one binary, one table (DESIGN.md). Not Google Benchmark: GPU work is
// timed with CUDA events around each call, warm-up first, the median of --reps timed calls.
//
// GEMMs on the Kimi-K3 shapes (N×K: q/k/v/g 12288×7168, o 7168×12288, q_b 18432×1536) at
// M = 1 … 8192, y = x·Wᵀ with bf16 output:
//   bf16      cuBLASLt bf16 GEMM (bf16 x and W)
//   fp8 raw   cuBLASLt block-scaled FP8 GEMM alone (x already quantised)
//   pb_wo     the FP8_PB_WO path: our 1×128 activation quantisation + the same GEMM
// Weights rotate over enough copies to exceed the 60 MB L2 (each call reads a cold copy), so the
// weight-streaming rate at small M is a DRAM figure. Memory-bound kernels at 8192 tokens report
// GB/s of the bytes they must move (each input read once, each output written once).
//
// MoE (backend/cuda/moe/moe.h) at the Kimi-Linear-48B-A3B (256 experts, top-8, hidden 2304, expert
// intermediate 1024) and Kimi-K3 (896 experts, top-16, latent 3584, intermediate 3072) shapes with
// bf16 expert banks, T = 1 … 4096 tokens of random routing: the dispatch, each grouped GEMM (TB/s of
// the weight bytes of the experts the routing hits, counted on the host, and TFLOP/s of the real
// rows), and the whole routed layer (dispatch → gather → GEMM1 → SiLU → GEMM2 → combine); plus a
// compute-bound reference ("dense": 8 experts, ~1024 rows each, 4096-wide).
//
// 4-bit experts (backend/cuda/moe/moe_w4.h, --moe-w4): the Kimi-K3 routed layer (896 experts, top-16,
// GEMM1 [w1|w3] 3584 → 2×3072, GEMM2 3072 → 3584) with NVFP4 and MXFP4 banks at T = 1 … 4096, each
// kernel (auto; dec8 / dec / dec3 = the decode kernel with 8 activation rows and 8 pipeline stages,
// 16 rows and 5 / 3 stages; the tile kernels m16 = decode class, m64 / m128 = prefill class) timed
// interleaved with the bf16 grouped GEMM on the same routings; TB/s on the packed bytes (codes + block scales) of the experts hit, TF/s over real rows,
// and the speed-up over bf16. --quick: T = 1 … 512 only.
//
// GGUF experts (quant/formats/ggml/cuda/moe_ggml.h, --moe-ggml: this section only): the decode grouped GEMV over
// Q4_K, Q2_K, Q3_K, Q4_0 and Q8_0 banks at the Kimi-K3 layer shapes, T = 1, 8, 64, with 1, 2, 3, 4 and 8
// weight rows per warp; TB/s on the packed GGUF bytes of the experts hit (target 2.5).
//
// ModelSlim W4A8 experts (quant/formats/modelslim/cuda/moe_w4a8.h, --moe-w4a8): the same Kimi-K3 layer with int4 banks
// (per channel, and per group of 256) times int8 per-row activations; the quantisation kernel and each
// GEMM kernel (auto and every tile) timed interleaved with the bf16 grouped GEMM; TB/s on the packed
// bytes (codes + fp32 scales) of the experts hit, TOPS over real rows, speed-up over bf16.
//
// Run: k3_bench_cuda [--reps N] [--arena 75%] [--quick] [--tokens T,T,...] [--moe] [--moe-tiles] [--memory] [--gemv] [--moe-w4] [--moe-w4a8] [--moe-ggml [--ggml-types q2_K,q4_K]]
//   --moe        the MoE section only;  --moe-tiles  time every grouped-GEMM tile height, not only kAuto
//   --memory     the copy ceiling and the memory-bound table only;  --gemv  the decode bf16 GEMMs only
//   --moe-w4     the 4-bit expert section only;  --moe-w4a8  the W4A8 expert section only
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
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/moe/moe.h"
#include "quant/formats/ggml/cuda/moe_ggml.h"
#include "quant/formats/nvfp4/cuda/moe_nvfp4_act.h"
#include "backend/cuda/moe/moe_w4.h"
#include "quant/formats/modelslim/cuda/moe_w4a8.h"
#include "backend/cuda/ops/ops.h"
#include "backend/cuda/core/stream.h"
#include "backend/cuda/core/upload.h"
#include "core/numeric.h"

namespace k3::cuda {
namespace {

constexpr double kReadCeilingTBs = 3.83;   // H200, read-only (docs/performance.md, ceilings)
constexpr double kBf16CeilingTF = 797.0;   // H200, cuBLASLt bf16 8192³, measured
constexpr double kFp8CeilingTF = 1332.0;   // H200, cuBLASLt block-scaled FP8 8192³, measured
constexpr size_t kRotateBytes = size_t{256} << 20;  // > 4× the L2

int g_reps = 30;
std::vector<int64_t> g_tokens;  // --tokens: the MoE benches' token counts instead of their defaults

// Median milliseconds of `reps` timed calls of fn(i) after 3 warm-up calls.
double time_ms(cudaStream_t stream, const std::function<void(int)>& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  std::vector<Event> ev(static_cast<size_t>(2 * g_reps));
  for (int r = 0; r < g_reps; ++r) {
    ev[2 * r].record(stream);
    fn(r + 3);
    ev[2 * r + 1].record(stream);
  }
  ev.back().sync();
  std::vector<double> ms;
  for (int r = 0; r < g_reps; ++r) ms.push_back(ev[2 * r + 1].elapsed_ms_since(ev[2 * r]));
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

// Several variants timed in interleaved rounds (A B C A B C …, each call between its own events), so
// a drift of the clock or the power state over the run hits them alike; the median of each. A
// variant that throws (say a GEMM cuBLASLt has no algorithm for) prints once and gives NaN.
std::vector<double> time_interleaved(cudaStream_t stream, const std::vector<std::pair<const char*, std::function<void(int)>>>& fns) {
  const size_t nf = fns.size();
  std::vector<bool> ok(nf, true);
  for (size_t f = 0; f < nf; ++f) {
    try {
      for (int i = 0; i < 3; ++i) fns[f].second(i);
    } catch (const std::exception& e) {
      std::printf("[%s failed: %s]\n", fns[f].first, e.what());
      ok[f] = false;
    }
  }
  std::vector<Event> ev(static_cast<size_t>(2 * g_reps) * nf);
  for (int r = 0; r < g_reps; ++r) {
    for (size_t f = 0; f < nf; ++f) {
      if (!ok[f]) continue;
      ev[(r * nf + f) * 2].record(stream);
      fns[f].second(r + 3);
      ev[(r * nf + f) * 2 + 1].record(stream);
    }
  }
  K3_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> med(nf, std::nan(""));
  for (size_t f = 0; f < nf; ++f) {
    if (!ok[f]) continue;
    std::vector<double> ms;
    for (int r = 0; r < g_reps; ++r) ms.push_back(ev[(r * nf + f) * 2 + 1].elapsed_ms_since(ev[(r * nf + f) * 2]));
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    med[f] = ms[ms.size() / 2];
  }
  return med;
}

// time_ms, but a failure (say a GEMM cuBLASLt has no algorithm for) prints once and gives NaN, so
// the rest of the table still comes out.
double try_time_ms(cudaStream_t stream, const char* what, const std::function<void(int)>& fn) {
  try {
    return time_ms(stream, fn);
  } catch (const std::exception& e) {
    std::printf("[%s failed: %s]\n", what, e.what());
    return std::nan("");
  }
}

// A device pool of random data (e4m3 codes of N(0,1) values, or bf16 of N(0,1)), copied into
// buffers at varying offsets: realistic bit patterns (never zeros) without host generation per
// buffer.
class RandomPool {
 public:
  RandomPool(Arena& arena, DType t, size_t bytes) : bytes_(bytes) {
    std::mt19937_64 gen(12345 + static_cast<int>(t));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<uint8_t> host(bytes);
    if (t == DType::kE4M3) {
      for (auto& b : host) b = encode_e4m3fn_sat(nd(gen));
    } else {
      for (size_t i = 0; i + 1 < bytes; i += 2) {
        const uint16_t v = encode_bf16(nd(gen));
        std::memcpy(&host[i], &v, 2);
      }
    }
    data_ = static_cast<char*>(arena.alloc(bytes, "random pool"));
    copy_bytes_to_device(data_, host.data(), bytes);
  }
  void fill(void* dst, size_t bytes, size_t salt) const {
    size_t off = 0;
    size_t src = (salt * 4099 * 16) % (bytes_ / 2);
    while (off < bytes) {
      const size_t n = std::min(bytes - off, bytes_ - src);
      K3_CUDA_CHECK(cudaMemcpy(static_cast<char*>(dst) + off, data_ + src, n, cudaMemcpyDeviceToDevice));
      off += n;
      src = 0;
    }
  }

 private:
  size_t bytes_;
  char* data_ = nullptr;
};

struct Shape {
  const char* name;
  int64_t n, k;
};

struct GemmRow {
  std::string shape;
  int64_t m = 0;
  double bf16_ms = 0, raw_ms = 0, pbwo_ms = 0, quant_ms = 0;
};

void print_gemm_header() {
  std::printf("%-14s %5s | %9s %8s | %9s %8s | %9s %8s %6s | %8s | %8s %6s\n", "shape NxK", "M", "bf16 us", "TF/s",
              "fp8raw us", "TF/s", "pb_wo us", "TF/s", "/raw", "quant us", "W GB/s", "%3.83");
}

void print_gemm_row(const GemmRow& r, int64_t n, int64_t k) {
  const double flop = 2.0 * static_cast<double>(r.m) * n * k;
  const double tf = 1e-9;  // flop / ms -> TFLOP/s: flop / (ms·1e-3) / 1e12
  const double wbytes = static_cast<double>(n) * k;  // fp8 weight bytes
  const double wgbs = wbytes / (r.pbwo_ms * 1e-3) / 1e9;
  std::printf("%-14s %5lld | %9.1f %8.1f | %9.1f %8.1f | %9.1f %8.1f %5.0f%% | %8.1f | %8.0f %5.0f%%\n",
              r.shape.c_str(), static_cast<long long>(r.m), r.bf16_ms * 1e3, flop * tf / r.bf16_ms, r.raw_ms * 1e3,
              flop * tf / r.raw_ms, r.pbwo_ms * 1e3, flop * tf / r.pbwo_ms, 100.0 * r.raw_ms / r.pbwo_ms,
              r.quant_ms * 1e3, wgbs, 100.0 * wgbs / (kReadCeilingTBs * 1e3));
}

void bench_gemms(Arena& arena, Blas& blas, Stream& stream, const RandomPool& fp8_pool, const RandomPool& bf16_pool,
                 const std::vector<Shape>& shapes, const std::vector<int64_t>& ms) {
  std::printf("\n== GEMM y[M,N] = x[M,K]·W[N,K]^T, bf16 out; median of %d interleaved rounds; weights rotate over"
              " >= 256 MiB; fp8 at M < 8 runs padded to 8 rows ==\n", g_reps);
  print_gemm_header();
  const int64_t m_max = *std::max_element(ms.begin(), ms.end());
  for (const Shape& s : shapes) {
    const size_t mark = arena.mark();
    const int64_t N = s.n, K = s.k;
    const int copies8 = static_cast<int>(std::max<size_t>(2, (kRotateBytes + N * K - 1) / (N * K)));
    const int copies16 = static_cast<int>(std::max<size_t>(2, (kRotateBytes + 2 * N * K - 1) / (2 * N * K)));
    std::vector<Fp8BlockWeight> w8(static_cast<size_t>(copies8));
    std::vector<float> scales(static_cast<size_t>((N + 127) / 128 * ((K + 127) / 128)));
    std::mt19937 gen(7);
    for (float& v : scales) v = std::uniform_real_distribution<float>(0.5f, 2.0f)(gen) * 1e-2f;
    for (int c = 0; c < copies8; ++c) {
      w8[c].codes = arena.alloc_tensor(DType::kE4M3, N, K, "w fp8");
      fp8_pool.fill(w8[c].codes.data, w8[c].codes.bytes(), c);
      // Scales in cuBLASLt's padded BLK128x128 layout (as upload_fp8_block_weight repacks them).
      w8[c].scale_ld = fp8_block_scale_ld(K);
      std::vector<float> packed(static_cast<size_t>((N + 127) / 128 * w8[c].scale_ld), 0.0f);
      for (int64_t i = 0; i < (N + 127) / 128; ++i) {
        for (int64_t j = 0; j < (K + 127) / 128; ++j) packed[i * w8[c].scale_ld + j] = scales[i * ((K + 127) / 128) + j];
      }
      w8[c].scales = arena.alloc_n<float>(packed.size(), "w scales");
      copy_bytes_to_device(w8[c].scales, packed.data(), packed.size() * sizeof(float));
    }
    std::vector<DeviceTensor> w16(static_cast<size_t>(copies16));
    for (int c = 0; c < copies16; ++c) {
      w16[c] = arena.alloc_tensor(DType::kBF16, N, K, "w bf16");
      bf16_pool.fill(w16[c].data, w16[c].bytes(), c);
    }
    const DeviceTensor x_all = arena.alloc_tensor(DType::kBF16, m_max, K, "x");
    bf16_pool.fill(x_all.data, x_all.bytes(), 99);
    const DeviceTensor xq_all = arena.alloc_tensor(DType::kE4M3, m_max, K, "xq");
    float* xs_all = arena.alloc_n<float>(static_cast<size_t>(fp8_1x128_scale_count(m_max, K)), "xs");
    const DeviceTensor y_all = arena.alloc_tensor(DType::kBF16, m_max, N, "y");

    for (int64_t M : ms) {
      // FP8 block GEMMs run on M padded to a multiple of 8 (gemm.h); the output is given the padded
      // rows, as the engine allocates it, so no copy follows.
      const int64_t Mp = fp8_block_padded_rows(M);
      const DeviceTensor x = x_all.row_slice(0, M), xq = xq_all.row_slice(0, Mp), y = y_all.row_slice(0, M);
      const DeviceTensor yp = y_all.row_slice(0, Mp);
      GemmRow row;
      row.shape = std::to_string(N) + "x" + std::to_string(K);
      row.m = M;
      quantize_fp8_1x128(x, xq, xs_all, stream);
      const std::vector<double> t = time_interleaved(
          stream, {{"bf16", [&](int i) { blas.bf16(x, w16[i % copies16], y, stream); }},
                   {"fp8 raw", [&](int i) { blas.fp8_block(xq, xs_all, w8[i % copies8], yp, stream); }},
                   {"pb_wo", [&](int i) { linear_fp8_pb_wo(blas, arena, x, w8[i % copies8], yp, stream); }},
                   {"quant", [&](int) { quantize_fp8_1x128(x, xq, xs_all, stream); }}});
      row.bf16_ms = t[0];
      row.raw_ms = t[1];
      row.pbwo_ms = t[2];
      row.quant_ms = t[3];
      print_gemm_row(row, N, K);
      std::fflush(stdout);
    }
    K3_CUDA_CHECK(cudaDeviceSynchronize());
    arena.reset(mark);
  }
}

// Decode-class bf16 GEMMs (M ≤ kGemvMaxRows): cuBLASLt against our gemv_bf16, interleaved, on the
// projections of the Kimi-Linear-48B-A3B (hidden 2304) and Kimi-K3 (7168) shapes; GB/s of the bf16
// weight bytes, weights rotating over >= 256 MiB.
void bench_gemv(Arena& arena, Blas& blas, Stream& stream, const RandomPool& bf16_pool) {
  std::printf("\n== decode bf16 GEMM y[M,N] = x[M,K]·W[N,K]^T: cuBLASLt vs gemv_bf16; median of %d interleaved rounds ==\n",
              g_reps);
  std::printf("%-16s %3s | %9s %8s %6s | %9s %8s %6s\n", "shape NxK", "M", "cublas us", "W GB/s", "%3.83", "gemv us",
              "W GB/s", "%3.83");
  const std::vector<Shape> shapes = {{"lin q/k/v", 4096, 2304}, {"lin o", 2304, 4096}, {"lin shared up", 1024, 2304},
                                     {"k3 q/k/v/g", 12288, 7168}, {"k3 o", 7168, 12288}, {"k3 q_b", 18432, 1536}};
  for (const Shape& s : shapes) {
    const size_t mark = arena.mark();
    const int64_t N = s.n, K = s.k;
    const int copies = static_cast<int>(std::max<size_t>(2, (kRotateBytes + 2 * N * K - 1) / (2 * N * K)));
    std::vector<DeviceTensor> w(static_cast<size_t>(copies));
    for (int c = 0; c < copies; ++c) {
      w[c] = arena.alloc_tensor(DType::kBF16, N, K, "w bf16");
      bf16_pool.fill(w[c].data, w[c].bytes(), c);
    }
    const DeviceTensor x_all = arena.alloc_tensor(DType::kBF16, kGemvMaxRows, K, "x");
    bf16_pool.fill(x_all.data, x_all.bytes(), 99);
    const DeviceTensor y_all = arena.alloc_tensor(DType::kBF16, kGemvMaxRows, N, "y");
    for (int64_t M : {1, 2, 4, 8}) {
      const DeviceTensor x = x_all.row_slice(0, M), y = y_all.row_slice(0, M);
      const std::vector<double> t =
          time_interleaved(stream, {{"cublas", [&](int i) { blas.bf16(x, w[i % copies], y, stream); }},
                                    {"gemv", [&](int i) { gemv_bf16(x, w[i % copies], y, stream); }}});
      const double gb = 2.0 * static_cast<double>(N) * K / 1e9;
      const double c_gbs = gb / (t[0] * 1e-3), g_gbs = gb / (t[1] * 1e-3);
      std::printf("%-16s %3lld | %9.1f %8.0f %5.0f%% | %9.1f %8.0f %5.0f%%\n", (std::string(s.name) + " " + std::to_string(N) + "x" + std::to_string(K)).c_str(),
                  static_cast<long long>(M), t[0] * 1e3, c_gbs, 100.0 * c_gbs / (kReadCeilingTBs * 1e3), t[1] * 1e3,
                  g_gbs, 100.0 * g_gbs / (kReadCeilingTBs * 1e3));
      std::fflush(stdout);
    }
    K3_CUDA_CHECK(cudaDeviceSynchronize());
    arena.reset(mark);
  }
}

void bench_ceilings(Arena& arena, Blas& blas, Stream& stream, const RandomPool& fp8_pool, const RandomPool& bf16_pool,
                    bool gemms) {
  std::printf("\n== ceilings on this device (same binary) ==\n");
  const size_t mark = arena.mark();
  {
    const size_t bytes = size_t{2} << 30;
    void* a = arena.alloc(bytes, "copy src");
    void* b = arena.alloc(bytes, "copy dst");
    fp8_pool.fill(a, bytes, 1);
    const double ms = time_ms(stream, [&](int) {
      K3_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
    });
    std::printf("device-to-device copy 2 GiB: %.2f TB/s (read + write)\n", 2.0 * bytes / (ms * 1e-3) / 1e12);
  }
  arena.reset(mark);
  if (!gemms) return;
  const int64_t S = 8192;
  const DeviceTensor x = arena.alloc_tensor(DType::kBF16, S, S, "x");
  const DeviceTensor w = arena.alloc_tensor(DType::kBF16, S, S, "w");
  const DeviceTensor y = arena.alloc_tensor(DType::kBF16, S, S, "y");
  bf16_pool.fill(x.data, x.bytes(), 3);
  bf16_pool.fill(w.data, w.bytes(), 4);
  const double flop = 2.0 * S * S * S;
  double ms = try_time_ms(stream, "bf16 8192^3", [&](int) { blas.bf16(x, w, y, stream); });
  std::printf("bf16 GEMM 8192^3: %.0f TFLOP/s (issue figure %.0f)\n", flop / (ms * 1e-3) / 1e12, kBf16CeilingTF);
  Fp8BlockWeight w8;
  w8.codes = arena.alloc_tensor(DType::kE4M3, S, S, "w8");
  fp8_pool.fill(w8.codes.data, w8.codes.bytes(), 5);
  w8.scale_ld = fp8_block_scale_ld(S);
  std::vector<float> ones(static_cast<size_t>(S / 128 * w8.scale_ld), 0.01f);
  w8.scales = arena.alloc_n<float>(ones.size(), "w8 scales");
  copy_bytes_to_device(w8.scales, ones.data(), ones.size() * sizeof(float));
  const DeviceTensor xq = arena.alloc_tensor(DType::kE4M3, S, S, "xq");
  float* xs = arena.alloc_n<float>(static_cast<size_t>(fp8_1x128_scale_count(S, S)), "xs");
  quantize_fp8_1x128(x, xq, xs, stream);
  ms = try_time_ms(stream, "fp8 8192^3", [&](int) { blas.fp8_block(xq, xs, w8, y, stream); });
  std::printf("block-scaled FP8 GEMM 8192^3: %.0f TFLOP/s (issue figure %.0f)\n", flop / (ms * 1e-3) / 1e12,
              kFp8CeilingTF);
  K3_CUDA_CHECK(cudaDeviceSynchronize());
  arena.reset(mark);
}

void print_bw(const char* name, const std::string& shape, double bytes, double ms) {
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-26s %-22s %9.1f %9.1f %8.0f %5.0f%%\n", name, shape.c_str(), bytes / 1e6, ms * 1e3, gbs,
              100.0 * gbs / (kReadCeilingTBs * 1e3));
}

void bench_memory_bound(Arena& arena, Stream& stream, const RandomPool& bf16_pool) {
  std::printf("\n== memory-bound kernels (bytes = each input read once + each output written once) ==\n");
  std::printf("%-26s %-22s %9s %9s %8s %6s\n", "kernel", "shape", "MB", "us", "GB/s", "%3.83");
  const size_t mark = arena.mark();
  const int64_t T = 8192, H = 7168, I = 3072, E = 896;
  std::vector<float> w(static_cast<size_t>(H), 1.0f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + 0.001f * static_cast<float>(i % 1000);
  const DeviceTensor dw = upload_f32(arena, w.data(), 1, H, DType::kF32, "norm w");
  std::vector<DeviceTensor> cand;
  for (int j = 0; j < 9; ++j) {
    cand.push_back(arena.alloc_tensor(DType::kBF16, T, H, "candidate"));
    bf16_pool.fill(cand.back().data, cand.back().bytes(), 10 + j);
  }
  const DeviceTensor y = arena.alloc_tensor(DType::kBF16, T, H, "y");
  const std::string th = std::to_string(T) + "x" + std::to_string(H);
  double ms = time_ms(stream, [&](int) { rms_norm(cand[0], dw.as<float>(), 1e-5f, y, stream); });
  print_bw("rms_norm bf16->bf16", th, 2.0 * T * H * 2, ms);
  for (AttnResAlgo algo : {AttnResAlgo::kOnePass, AttnResAlgo::kTwoPass}) {
    ms = time_ms(stream, [&](int) { attn_res_mix_norm(cand, dw.as<float>(), dw.as<float>(), 1e-5f, y, stream, algo); });
    print_bw(algo == AttnResAlgo::kOnePass ? "attn_res 9 cand, one pass" : "attn_res 9 cand, two pass", th,
             10.0 * T * H * 2, ms);
  }
  const DeviceTensor q = arena.alloc_tensor(DType::kE4M3, T, H, "q");
  float* qs = arena.alloc_n<float>(static_cast<size_t>(fp8_1x128_scale_count(T, H)), "qs");
  ms = time_ms(stream, [&](int) { quantize_fp8_1x128(cand[1], q, qs, stream); });
  print_bw("quantize_fp8_1x128 bf16", th, T * H * 3.0 + T * H / 128.0 * 4, ms);
  const DeviceTensor gu = arena.alloc_tensor(DType::kBF16, T, 2 * I, "gate|up");
  bf16_pool.fill(gu.data, gu.bytes(), 30);
  const DeviceTensor act = arena.alloc_tensor(DType::kBF16, T, I, "act");
  const GatedActivation silu{}, situ{true, 2.5f, 6.0f};
  ms = time_ms(stream, [&](int) { gated_activation(silu, gu.col_slice(0, I), gu.col_slice(I, I), act, stream); });
  print_bw("gated_activation silu", std::to_string(T) + "x" + std::to_string(I), 3.0 * T * I * 2, ms);
  ms = time_ms(stream, [&](int) { gated_activation(situ, gu.col_slice(0, I), gu.col_slice(I, I), act, stream); });
  print_bw("gated_activation situ", std::to_string(T) + "x" + std::to_string(I), 3.0 * T * I * 2, ms);
  std::vector<float> logits(static_cast<size_t>(T * E));
  std::mt19937 gen(3);
  for (float& v : logits) v = std::normal_distribution<float>(0.0f, 2.0f)(gen);
  const DeviceTensor dl = upload_f32(arena, logits.data(), T, E, DType::kF32, "logits");
  const DeviceTensor bias = upload_f32(arena, logits.data(), 1, E, DType::kF32, "bias");
  const DeviceTensor ids = arena.alloc_tensor(DType::kI32, T, 16, "ids");
  const DeviceTensor rw = arena.alloc_tensor(DType::kF32, T, 16, "route weights");
  RouterParams rp;
  rp.experts = E;
  rp.top_k = 16;
  for (RouterKernel kernel : {RouterKernel::kWarp, RouterKernel::kBlock}) {
    const char* name = kernel == RouterKernel::kWarp ? "moe_route 896/16 warp" : "moe_route 896/16 block";
    ms = time_ms(stream, [&](int) { moe_route(rp, dl, bias.as<float>(), ids, rw, stream, kernel); });
    print_bw(name, std::to_string(T) + " tokens", T * E * 4.0 + T * 16 * 8.0, ms);
    ms = time_ms(stream, [&](int) {
      moe_route(rp, dl.row_slice(0, 1), bias.as<float>(), ids.row_slice(0, 1), rw.row_slice(0, 1), stream, kernel);
    });
    std::printf("%-26s %-22s %9s %9.1f   (latency)\n", name, "1 token", "", ms * 1e3);
  }
  ms = time_ms(stream, [&](int) { rms_norm(cand[0].row_slice(0, 1), dw.as<float>(), 1e-5f, y.row_slice(0, 1), stream); });
  std::printf("%-26s %-22s %9s %9.1f   (latency)\n", "rms_norm", "1x7168", "", ms * 1e3);
  K3_CUDA_CHECK(cudaDeviceSynchronize());
  arena.reset(mark);
}


// ---- MoE ------------------------------------------------------------------------------------------

struct MoeShape {
  const char* name;
  int64_t experts, top_k, hidden, inter;
  std::vector<int64_t> tokens;
};

const char* tile_name(MoeTile t) {
  switch (t) {
    case MoeTile::kM16: return "m16";
    case MoeTile::kM64: return "m64";
    case MoeTile::kM128: return "m128";
    case MoeTile::kAuto: break;
  }
  return "auto";
}

void print_moe_row(const char* model, int64_t T, int64_t R, double hit, const char* what, const std::string& tile,
                   double ms, double wbytes, double flop) {
  const double tbs = wbytes / (ms * 1e-3) / 1e12, tf = flop / (ms * 1e-3) / 1e12;
  if (wbytes > 0) {
    std::printf("%-12s %5lld %6lld %6.1f | %-9s %-10s | %9.1f %8.3f %7.2f %5.0f%% %7.1f %5.1f%%\n", model,
                static_cast<long long>(T), static_cast<long long>(R), hit, what, tile.c_str(), ms * 1e3, wbytes / 1e9,
                tbs, 100.0 * tbs / kReadCeilingTBs, tf, 100.0 * tf / kBf16CeilingTF);
  } else {
    std::printf("%-12s %5lld %6lld %6.1f | %-9s %-10s | %9.1f\n", model, static_cast<long long>(T),
                static_cast<long long>(R), hit, what, tile.c_str(), ms * 1e3);
  }
}

constexpr int kRoutings = 8;

// kRoutings random routings of T tokens (k distinct experts per token), dispatched; hit = the mean
// number of distinct experts they touch.
struct Routings {
  std::vector<MoeDispatch> d;
  std::vector<DeviceTensor> ids;
  double hit = 0;
};

Routings make_routings(Arena& arena, Stream& stream, std::mt19937_64& gen, int64_t T, int64_t k, int64_t E) {
  Routings rt;
  std::vector<int32_t> pool(static_cast<size_t>(E));
  std::iota(pool.begin(), pool.end(), 0);
  for (int r = 0; r < kRoutings; ++r) {
    std::vector<int32_t> h(static_cast<size_t>(T * k));
    std::vector<char> seen(static_cast<size_t>(E), 0);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        std::swap(pool[j], pool[std::uniform_int_distribution<int64_t>(j, E - 1)(gen)]);
        h[t * k + j] = pool[j];
        seen[pool[j]] = 1;
      }
    }
    rt.hit += static_cast<double>(std::count(seen.begin(), seen.end(), 1)) / kRoutings;
    rt.ids.push_back(arena.alloc_tensor(DType::kI32, T, k, "moe ids"));
    copy_bytes_to_device(rt.ids.back().data, h.data(), h.size() * sizeof(int32_t));
    rt.d.push_back(moe_dispatch_view(arena.alloc(moe_dispatch_bytes(T, k, E), "moe dispatch"), T, k, E));
    moe_dispatch(rt.ids.back(), rt.d.back(), stream);
  }
  return rt;
}

void bench_moe(Arena& arena, Stream& stream, const RandomPool& bf16_pool, bool all_tiles) {
  std::printf("\n== MoE, bf16 expert banks, random routing (k distinct experts per token; %d routings rotated over"
              " the timed calls); GEMM1 [w1|w3] N = 2·inter, K = hidden, bf16 out; GEMM2 w2 N = hidden, K = inter;"
              " W GB = weight bytes of the experts hit (mean over the routings); TF/s over real rows ==\n",
              kRoutings);
  std::printf("%-12s %5s %6s %6s | %-9s %-10s | %9s %8s %7s %6s %7s %6s\n", "model", "T", "rows", "hit", "kernel",
              "tile", "us", "W GB", "TB/s", "%3.83", "TF/s", "%797");
  // "dense": 8 experts of 1024 rows each on average, the compute-bound reference for the tiles.
  const std::vector<int64_t> tokens = {1, 8, 64, 512, 4096};
  const std::vector<MoeShape> shapes = {{"kimi-linear", 256, 8, 2304, 1024, tokens},
                                        {"kimi-k3", 896, 16, 3584, 3072, tokens},
                                        {"dense", 8, 1, 4096, 2048, {8192}}};
  for (const MoeShape& s : shapes) {
    const size_t mark = arena.mark();
    const int64_t E = s.experts, k = s.top_k, H = s.hidden, I = s.inter;
    const int64_t t_max = s.tokens.back(), r_max = t_max * k;
    const double need = 2.0 * (E * 3 * I * H + r_max * (2 * H + 3 * I) + t_max * H);
    if (need > static_cast<double>(arena.capacity() - arena.used()) * 0.98) {
      std::printf("%-12s skipped: needs %.1f GB of arena, %.1f GB free (--arena)\n", s.name, need / 1e9,
                  static_cast<double>(arena.capacity() - arena.used()) / 1e9);
      continue;
    }
    const DeviceTensor w1 = arena.alloc_tensor(DType::kBF16, E * 2 * I, H, "moe w1|w3");
    const DeviceTensor w2 = arena.alloc_tensor(DType::kBF16, E * H, I, "moe w2");
    bf16_pool.fill(w1.data, w1.bytes(), 41);
    bf16_pool.fill(w2.data, w2.bytes(), 42);
    const DeviceTensor x = arena.alloc_tensor(DType::kBF16, t_max, H, "moe x");
    bf16_pool.fill(x.data, x.bytes(), 43);
    const DeviceTensor xs_all = arena.alloc_tensor(DType::kBF16, r_max, H, "moe xs");
    const DeviceTensor gu_all = arena.alloc_tensor(DType::kBF16, r_max, 2 * I, "moe gate|up");
    const DeviceTensor hs_all = arena.alloc_tensor(DType::kBF16, r_max, I, "moe act");
    const DeviceTensor ys_all = arena.alloc_tensor(DType::kBF16, r_max, H, "moe ys");
    const DeviceTensor out_all = arena.alloc_tensor(DType::kBF16, t_max, H, "moe out");
    bf16_pool.fill(hs_all.data, hs_all.bytes(), 44);
    std::mt19937_64 gen(2024);
    for (int64_t T : s.tokens) {
      const size_t tmark = arena.mark();
      const int64_t R = T * k;
      const Routings rt = make_routings(arena, stream, gen, T, k, E);
      const std::vector<MoeDispatch>& d = rt.d;
      const std::vector<DeviceTensor>& ids = rt.ids;
      const double hit = rt.hit;
      std::vector<float> wv(static_cast<size_t>(R), 1.0f / static_cast<float>(k));
      const DeviceTensor weights = upload_f32(arena, wv.data(), T, k, DType::kF32, "moe weights");
      const DeviceTensor xs = xs_all.row_slice(0, R), gu = gu_all.row_slice(0, R), hs = hs_all.row_slice(0, R);
      const DeviceTensor ys = ys_all.row_slice(0, R), out = out_all.row_slice(0, T), xt = x.row_slice(0, T);
      moe_gather(xt, d[0], xs, stream);
      const double w1_bytes = hit * 2.0 * I * H * 2, w2_bytes = hit * H * I * 2.0;
      const double f1 = 2.0 * R * 2 * I * H, f2 = 2.0 * R * H * I;
      double ms = time_ms(stream, [&](int i) { moe_dispatch(ids[i % kRoutings], d[i % kRoutings], stream); });
      print_moe_row(s.name, T, R, hit, "dispatch", "", ms, 0, 0);
      std::vector<MoeTile> tiles = {MoeTile::kAuto};
      if (all_tiles) tiles.insert(tiles.end(), {MoeTile::kM16, MoeTile::kM64, MoeTile::kM128});
      const std::string chosen = tile_name(moe_tile_for(R, E));
      for (MoeTile tile : tiles) {
        const std::string tname = tile == MoeTile::kAuto ? "auto=" + chosen : tile_name(tile);
        ms = time_ms(stream, [&](int i) { moe_grouped_gemm_bf16(xs, w1, d[i % kRoutings], gu, stream, tile); });
        print_moe_row(s.name, T, R, hit, "gemm1", tname, ms, w1_bytes, f1);
        ms = time_ms(stream, [&](int i) { moe_grouped_gemm_bf16(hs, w2, d[i % kRoutings], ys, stream, tile); });
        print_moe_row(s.name, T, R, hit, "gemm2", tname, ms, w2_bytes, f2);
      }
      const GatedActivation silu{};
      ms = time_ms(stream, [&](int i) {
        const MoeDispatch& di = d[i % kRoutings];
        moe_dispatch(ids[i % kRoutings], di, stream);
        moe_gather(xt, di, xs, stream);
        moe_grouped_gemm_bf16(xs, w1, di, gu, stream);
        gated_activation(silu, gu.col_slice(0, I), gu.col_slice(I, I), hs, stream);
        moe_grouped_gemm_bf16(hs, w2, di, ys, stream);
        moe_combine(ys, di, weights, out, false, stream);
      });
      print_moe_row(s.name, T, R, hit, "layer", "auto=" + chosen, ms, w1_bytes + w2_bytes, f1 + f2);
      std::fflush(stdout);
      K3_CUDA_CHECK(cudaStreamSynchronize(stream));
      arena.reset(tmark);
    }
    K3_CUDA_CHECK(cudaDeviceSynchronize());
    arena.reset(mark);
  }
}

// ---- MoE, quantized experts: one harness --------------------------------------------------------------

// The Kimi-K3 routed layer the quantized-expert sections measure (896 experts, top-16, GEMM1 [w1|w3]
// 3584 -> 2x3072, GEMM2 3072 -> 3584, bf16 out), with its bf16 activation buffers and, arena
// permitting, bf16 banks whose grouped GEMM every row is compared with (x bf16).
struct MoeLayer {
  static constexpr int64_t E = 896, k = 16, H = 3584, I = 3072;
  std::vector<int64_t> tokens;
  DeviceTensor x, xs, gu, hs, ys, bf1, bf2;  // x [T_max, H]; the others over R_max = T_max·k sorted rows
  bool with_bf16 = false;

  int64_t t_max() const { return tokens.back(); }
  int64_t r_max() const { return tokens.back() * k; }
  double bf16_bytes() const { return 2.0 * E * 3 * I * H; }
  double activation_bytes() const { return 2.0 * (r_max() * (2 * H + 3 * I) + t_max() * H); }
};

void print_moe_layer_header(const char* what, const char* bytes) {
  std::printf("\n== MoE, %s, Kimi-K3 layer: %lld experts, top-%lld, GEMM1 [w1|w3] %lld -> 2x%lld, GEMM2 %lld -> %lld,"
              " bf16 out; random routing (%d rotated); GB = %s of the experts hit; TF/s counts the real rows"
              " (TOPS for integer kernels); x bf16 = speed-up over the bf16 grouped GEMM ==\n",
              what, static_cast<long long>(MoeLayer::E), static_cast<long long>(MoeLayer::k),
              static_cast<long long>(MoeLayer::H), static_cast<long long>(MoeLayer::I),
              static_cast<long long>(MoeLayer::I), static_cast<long long>(MoeLayer::H), kRoutings, bytes);
}

// Whether `bank_bytes` (+ `extra` scratch) fit the arena next to the activations (else prints why);
// the bf16 reference banks are added when they fit too and `want_bf16`.
bool moe_layer_fits(const Arena& arena, MoeLayer& l, double bank_bytes, double extra, bool want_bf16) {
  const double free_b = static_cast<double>(arena.capacity() - arena.used()) * 0.98;
  const double need = bank_bytes + extra + l.activation_bytes();
  if (need > free_b) {
    std::printf("skipped: needs %.1f GB of arena, %.1f GB free (--arena)\n", need / 1e9, free_b / 0.98 / 1e9);
    return false;
  }
  l.with_bf16 = want_bf16 && need + l.bf16_bytes() <= free_b;
  if (want_bf16 && !l.with_bf16) std::printf("(bf16 banks left out: not enough arena; --arena)\n");
  return true;
}

void alloc_moe_layer(Arena& arena, const RandomPool& bf16_pool, MoeLayer& l) {
  const int64_t E = MoeLayer::E, H = MoeLayer::H, I = MoeLayer::I;
  if (l.with_bf16) {
    l.bf1 = arena.alloc_tensor(DType::kBF16, E * 2 * I, H, "moe bf16 w1|w3");
    l.bf2 = arena.alloc_tensor(DType::kBF16, E * H, I, "moe bf16 w2");
    bf16_pool.fill(l.bf1.data, l.bf1.bytes(), 41);
    bf16_pool.fill(l.bf2.data, l.bf2.bytes(), 42);
  }
  l.x = arena.alloc_tensor(DType::kBF16, l.t_max(), H, "moe x");
  l.xs = arena.alloc_tensor(DType::kBF16, l.r_max(), H, "moe xs");
  l.gu = arena.alloc_tensor(DType::kBF16, l.r_max(), 2 * I, "moe gate|up");
  l.hs = arena.alloc_tensor(DType::kBF16, l.r_max(), I, "moe act");
  l.ys = arena.alloc_tensor(DType::kBF16, l.r_max(), H, "moe ys");
  bf16_pool.fill(l.x.data, l.x.bytes(), 43);
  bf16_pool.fill(l.hs.data, l.hs.bytes(), 44);
  bf16_pool.fill(l.gu.data, l.gu.bytes(), 40);
}

// Kimi-K3's activation (its values do not change the work).
GatedActivation k3_situ() {
  GatedActivation situ;
  situ.situ = true, situ.beta = 10.0f;
  return situ;
}


// One GEMM of one token count: its sorted rows, input (GEMM2: the bf16 activation) and output.
struct MoeGemm {
  int64_t T, R;
  const Routings& rt;
  int gemm;  // 1 or 2
  const DeviceTensor& in;
  const DeviceTensor& out;
  int64_t N, K;
};

// A timed variant: bytes 0 = no bandwidth or throughput figure (an activation quantisation, say).
struct MoeVariant {
  std::string label;
  double bytes;
  std::function<void(int)> fn;  // call i uses routing i % kRoutings
};

// GEMM 2's input from GEMM 1's output gu as the model forms it — the activation applied by the
// quantisation kernel, one pass ("<label> act+quant") — and as two kernels, gated_activation into the
// bf16 rows hs, then the quantisation ("<label> act, quant"); no bandwidth figure.
void push_gemm2_input_variants(std::vector<MoeVariant>& vs, const std::string& label, const DeviceTensor& gu,
                               const DeviceTensor& hs, const std::function<void(const GatedActivation&)>& fused,
                               const std::function<void(const DeviceTensor&)>& quantize, cudaStream_t stream) {
  const int64_t I = hs.cols;
  vs.push_back({label + " act+quant", 0.0, [=](int) { fused(k3_situ()); }});
  vs.push_back({label + " act, quant", 0.0, [=](int) {
                  gated_activation(k3_situ(), gu.col_slice(0, I), gu.col_slice(I, I), hs, stream);
                  quantize(hs);
                }});
}

// For every T: kRoutings routings, the gather, `per_tokens` (the sections' own per-T preparation, in
// arena memory given back after the T), then per GEMM the bf16 reference (when present) and
// `variants`, timed in interleaved rounds, one row each.
void run_moe_layer(Arena& arena, Stream& stream, const MoeLayer& l,
                   const std::function<void(int64_t T, int64_t R, const Routings& rt)>& per_tokens,
                   const std::function<std::vector<MoeVariant>(const MoeGemm& g)>& variants) {
  const int64_t E = MoeLayer::E, k = MoeLayer::k, H = MoeLayer::H, I = MoeLayer::I;
  std::printf("%5s %6s %6s | %-5s %-18s | %9s %7s %7s %6s %7s %7s\n", "T", "rows", "hit", "gemm", "kernel", "us", "GB",
              "TB/s", "%3.83", "TF/s", "x bf16");
  std::mt19937_64 gen(2024);
  for (int64_t T : l.tokens) {
    const size_t tmark = arena.mark();
    const int64_t R = T * k;
    const Routings rt = make_routings(arena, stream, gen, T, k, E);
    const DeviceTensor xs = l.xs.row_slice(0, R), gu = l.gu.row_slice(0, R), hs = l.hs.row_slice(0, R);
    const DeviceTensor ys = l.ys.row_slice(0, R);
    moe_gather(l.x.row_slice(0, T), rt.d[0], xs, stream);
    per_tokens(T, R, rt);
    for (int gemm = 1; gemm <= 2; ++gemm) {
      const MoeGemm g{T, R, rt, gemm, gemm == 1 ? xs : hs, gemm == 1 ? gu : ys, gemm == 1 ? 2 * I : H, gemm == 1 ? H : I};
      std::vector<MoeVariant> vs;
      if (l.with_bf16) {
        const DeviceTensor w = gemm == 1 ? l.bf1 : l.bf2;
        vs.push_back({"bf16 auto=" + std::string(tile_name(moe_tile_for(R, E))), rt.hit * g.N * g.K * 2.0,
                      [&, w](int i) { moe_grouped_gemm_bf16(g.in, w, rt.d[i % kRoutings], g.out, stream); }});
      }
      for (MoeVariant& v : variants(g)) vs.push_back(std::move(v));
      std::vector<std::pair<const char*, std::function<void(int)>>> fns;
      for (const MoeVariant& v : vs) fns.emplace_back(v.label.c_str(), v.fn);
      const std::vector<double> ms = time_interleaved(stream, fns);
      const double flop = 2.0 * R * g.N * g.K;
      for (size_t f = 0; f < vs.size(); ++f) {
        const double sec = ms[f] * 1e-3, tbs = vs[f].bytes / sec / 1e12;
        const bool gemm_row = vs[f].bytes > 0;
        std::printf("%5lld %6lld %6.1f | gemm%d %-18s | %9.1f %7.3f %7.2f %5.0f%% %7.1f %7.2f\n",
                    static_cast<long long>(T), static_cast<long long>(R), rt.hit, gemm, vs[f].label.c_str(),
                    ms[f] * 1e3, vs[f].bytes / 1e9, gemm_row ? tbs : std::nan(""),
                    gemm_row ? 100.0 * tbs / kReadCeilingTBs : std::nan(""),
                    gemm_row ? flop / sec / 1e12 : std::nan(""),
                    l.with_bf16 && gemm_row ? ms[0] / ms[f] : std::nan(""));
      }
      std::fflush(stdout);
    }
    K3_CUDA_CHECK(cudaStreamSynchronize(stream));
    arena.reset(tmark);
  }
}

// "auto=<chosen>" for kAuto, else the tile's name.
std::string tile_label(MoeTile tile, MoeTile chosen) {
  return tile == MoeTile::kAuto ? "auto=" + std::string(tile_name(chosen)) : std::string(tile_name(tile));
}

constexpr MoeTile kAllTiles[] = {MoeTile::kAuto, MoeTile::kM16, MoeTile::kM64, MoeTile::kM128};

// ---- MoE, 4-bit experts ----------------------------------------------------------------------------

void bench_moe_w4(Arena& arena, Stream& stream, const RandomPool& bf16_pool, bool quick) {
  const int64_t E = MoeLayer::E, H = MoeLayer::H, I = MoeLayer::I;
  print_moe_layer_header("4-bit experts (W4A16)", "packed codes + block scales (bf16 weights for bf16)");
  MoeLayer l;
  l.tokens = quick ? std::vector<int64_t>{1, 8, 64, 512} : std::vector<int64_t>{1, 8, 64, 512, 4096};
  if (!g_tokens.empty()) l.tokens = g_tokens;
  const size_t mark = arena.mark();
  if (!moe_layer_fits(arena, l, 2.0 * E * 3 * I * H * (0.5 + 1.0 / 16), 0.0, true)) return;
  alloc_moe_layer(arena, bf16_pool, l);
  // Random codes; every block scale 1.0 (scale values do not change the kernels' work).
  struct Banks {
    W4Format f;
    MoeW4Bank g1, g2;
  };
  std::vector<Banks> banks;
  for (W4Format f : {W4Format::kNvfp4, W4Format::kMxfp4}) {
    Banks b{f, moe_w4_alloc(arena, f, E, 2 * I, H, 2, "moe w4 w1|w3"), moe_w4_alloc(arena, f, E, H, I, 1, "moe w4 w2")};
    const int scale_one = f == W4Format::kNvfp4 ? 9 << 3 : 127;
    for (const MoeW4Bank* m : {&b.g1, &b.g2}) {
      bf16_pool.fill(m->codes, m->code_bytes(), 45 + banks.size());
      K3_CUDA_CHECK(cudaMemset(m->scales, scale_one, m->scale_bytes()));
      const std::vector<float> ones(static_cast<size_t>(m->experts * m->parts), 1.0f);
      moe_w4_upload_out_scale(*m, ones.data());
    }
    banks.push_back(b);
  }
  const GatedActivation situ = k3_situ();
  // The W4A4 option's GEMM 2 input (NVFP4 values of the activation; every input_scale 1).
  const DeviceTensor a4 = arena.alloc_tensor(DType::kBF16, l.r_max(), I, "moe w4a4 activation values");
  const std::vector<float> unit_scales(static_cast<size_t>(E), 1.0f);
  const DeviceTensor input_scale = upload_f32(arena, unit_scales.data(), 1, E, DType::kF32, "w4a4 input scales");
  const std::vector<float> ones(static_cast<size_t>(l.r_max()), 1.0f);
  const float* unit_row_weights = upload_f32(arena, ones.data(), 1, l.r_max(), DType::kF32, "row weights").as<const float>();
  run_moe_layer(arena, stream, l, [](int64_t, int64_t, const Routings&) {}, [&](const MoeGemm& g) {
    std::vector<MoeVariant> vs;
    for (const Banks& b : banks) {
      const MoeW4Bank& w = g.gemm == 1 ? b.g1 : b.g2;
      // auto, the decode kernel (10 and 5 stages), the tile kernels (m16 = the register-prefetch
      // decode-class kernel it replaces where it fits).
      for (W4Kernel kernel : {W4Kernel::kAuto, W4Kernel::kDecode8, W4Kernel::kDecode, W4Kernel::kDecode3, W4Kernel::kM16,
                              W4Kernel::kM64, W4Kernel::kM128, W4Kernel::kWgmma}) {
        const std::string name =
            kernel == W4Kernel::kAuto
                ? "auto=" + std::string(w4_kernel_name(moe_w4_kernel_for(MoeTile::kAuto, b.f, g.R, E, g.K)))
                : std::string(w4_kernel_name(kernel));
        vs.push_back({std::string(w4_format_name(b.f)) + " " + name, g.rt.hit * g.N * g.K * (0.5 + 1.0 / w4_group(b.f)),
                      [&, w, kernel](int i) { moe_grouped_gemm_w4(g.in, w, g.rt.d[i % kRoutings], g.out, stream, kernel); }});
      }
      if (g.gemm == 1) {  // GEMM 1 with SiTU in the warpgroup-MMA kernel's epilogue (vs wg + "situ act")
        vs.push_back({std::string(w4_format_name(b.f)) + " wg+situ", g.rt.hit * g.N * g.K * (0.5 + 1.0 / w4_group(b.f)),
                      [&, w](int i) {
                        moe_grouped_gemm_w4_gated(g.in, w, g.rt.d[i % kRoutings], situ, l.hs.row_slice(0, g.R), stream,
                                                  W4Kernel::kWgmma);
                      }});
      }
      // GEMM 1 as the model runs it: after the gather, which lets the decode kernel (a programmatic
      // dependent) start streaming its weights at once. The gather alone is the row below.
      if (g.gemm == 1 && g.T <= 64) {
        vs.push_back({std::string(w4_format_name(b.f)) + " gather+auto", g.rt.hit * g.N * g.K * (0.5 + 1.0 / w4_group(b.f)),
                      [&, w](int i) {
                        const MoeDispatch& d = g.rt.d[i % kRoutings];
                        moe_gather(l.x.row_slice(0, g.T), d, g.in, stream);
                        moe_grouped_gemm_w4(g.in, w, d, g.out, stream, W4Kernel::kAuto);
                      }});
      }
      // GEMM 2 as the model runs it: the routing weights applied in the epilogue (MoeDispatch::row_weight).
      if (g.gemm == 2) {
        vs.push_back({std::string(w4_format_name(b.f)) + " auto+weights", g.rt.hit * g.N * g.K * (0.5 + 1.0 / w4_group(b.f)),
                      [&, w](int i) {
                        moe_grouped_gemm_w4(g.in, w, moe_weighted(g.rt.d[i % kRoutings], unit_row_weights), g.out, stream,
                                            W4Kernel::kAuto);
                      }});
      }
    }
    if (g.gemm == 1) {
      vs.push_back({"situ act", 0.0, [&](int) {
                      gated_activation(situ, g.out.col_slice(0, I), g.out.col_slice(I, I), l.hs.row_slice(0, g.R), stream);
                    }});
    }
    if (g.gemm == 1 && g.T <= 64) {
      vs.push_back({"gather", 0.0, [&](int i) { moe_gather(l.x.row_slice(0, g.T), g.rt.d[i % kRoutings], g.in, stream); }});
    }
    if (g.gemm == 2) {
      const DeviceTensor gu = l.gu.row_slice(0, g.R), out = a4.row_slice(0, g.R);
      const MoeDispatch d = g.rt.d[0];
      const float* scales = input_scale.as<const float>();
      push_gemm2_input_variants(
          vs, "w4a4 situ", gu, g.in,
          [&, gu, out, scales, d](const GatedActivation& act) {
            moe_quantize_nvfp4_activation(act, gu.col_slice(0, I), gu.col_slice(I, I), scales, d, out, stream);
          },
          [&, out, scales, d](const DeviceTensor& hs) { moe_quantize_nvfp4_rows(hs, scales, d, out, stream); }, stream);
    }
    // The routed experts of a decode step as the model runs them: gather, GEMM 1, SiTU, GEMM 2, each a
    // programmatic dependent of the one before (GB: both GEMMs' packed bytes).
    if (g.gemm == 2 && g.T <= 64) {
      const int64_t R = g.R;
      for (const Banks& b : banks) {
        vs.push_back({std::string(w4_format_name(b.f)) + " decode chain", g.rt.hit * 3.0 * I * H * (0.5 + 1.0 / w4_group(b.f)),
                      [&, b, situ, R](int i) {
                        const MoeDispatch& d = g.rt.d[i % kRoutings];
                        const DeviceTensor xs = l.xs.row_slice(0, R), gu = l.gu.row_slice(0, R), hs = l.hs.row_slice(0, R);
                        moe_gather(l.x.row_slice(0, g.T), d, xs, stream);
                        moe_grouped_gemm_w4(xs, b.g1, d, gu, stream, W4Kernel::kAuto);
                        gated_activation(situ, gu.col_slice(0, I), gu.col_slice(I, I), hs, stream);
                        moe_grouped_gemm_w4(hs, b.g2, d, l.ys.row_slice(0, R), stream, W4Kernel::kAuto);
                      }});
      }
    }
    return vs;
  });
  arena.reset(mark);
}

// ---- MoE, ModelSlim W4A8 experts ----------------------------------------------------------------------

// ModelSlim W4A8 experts (quant/formats/modelslim/cuda/moe_w4a8.h): per channel and per group of 256, every kernel
// choice, and the int8 row quantisation of each GEMM's input alone ("quant").
void bench_moe_w4a8(Arena& arena, Stream& stream, const RandomPool& bf16_pool) {
  const int64_t E = MoeLayer::E, H = MoeLayer::H, I = MoeLayer::I;
  const std::vector<int64_t> group_sizes = {0, 256};  // per channel, per group of 256
  print_moe_layer_header("ModelSlim W4A8 experts (int4 x int8 per row, mma s8)",
                         "int4 codes + f32 scales (bf16 weights for bf16)");
  MoeLayer l;
  l.tokens = {1, 8, 64, 512, 4096};
  if (!g_tokens.empty()) l.tokens = g_tokens;
  double bank_bytes = 0;
  for (int64_t gs : group_sizes) bank_bytes += E * 3.0 * I * H * (0.5 + 4.0 / static_cast<double>(gs > 0 ? gs : I));
  const size_t mark = arena.mark();
  if (!moe_layer_fits(arena, l, bank_bytes, l.r_max() * (H + I + 8.0), true)) return;
  alloc_moe_layer(arena, bf16_pool, l);
  // Random codes; every scale the float of bytes 0x3F (≈ 0.747): scale values do not change the kernels' work.
  struct Banks {
    int64_t group_size;
    MoeW4A8Bank g1, g2;
  };
  std::vector<Banks> banks;
  for (int64_t gs : group_sizes) {
    Banks b{gs, moe_w4a8_alloc(arena, E, 2 * I, H, gs, 2, "moe w4a8 w1|w3"), moe_w4a8_alloc(arena, E, H, I, gs, 1, "moe w4a8 w2")};
    for (const MoeW4A8Bank* m : {&b.g1, &b.g2}) {
      bf16_pool.fill(m->codes, m->code_bytes(), 47 + banks.size());
      K3_CUDA_CHECK(cudaMemset(m->scales, 0x3F, m->scale_count() * sizeof(float)));
      const std::vector<float> ones(static_cast<size_t>(m->experts * m->parts), 1.0f);
      moe_w4a8_upload_out_scale(*m, ones.data());
    }
    banks.push_back(b);
  }
  const DeviceTensor xq_all = arena.alloc_tensor(DType::kU8, l.r_max(), H, "moe xs int8");
  const DeviceTensor hq_all = arena.alloc_tensor(DType::kU8, l.r_max(), I, "moe act int8");
  float* xq_scale = arena.alloc_n<float>(static_cast<size_t>(l.r_max()), "moe xs scale");
  float* hq_scale = arena.alloc_n<float>(static_cast<size_t>(l.r_max()), "moe act scale");
  Int8Rows xq, hq;
  run_moe_layer(
      arena, stream, l,
      [&](int64_t, int64_t R, const Routings&) {
        xq = {xq_all.row_slice(0, R), xq_scale};
        hq = {hq_all.row_slice(0, R), hq_scale};
        moe_quantize_int8_rows(l.xs.row_slice(0, R), xq, stream);
        moe_quantize_int8_rows(l.hs.row_slice(0, R), hq, stream);
      },
      [&](const MoeGemm& g) {
        const Int8Rows& inq = g.gemm == 1 ? xq : hq;
        std::vector<MoeVariant> vs;
        vs.push_back({"quant", 0.0, [&](int) { moe_quantize_int8_rows(g.in, inq, stream); }});
        if (g.gemm == 2) {
          const DeviceTensor gu = l.gu.row_slice(0, g.R);
          push_gemm2_input_variants(
              vs, "situ", gu, g.in,
              [&, gu](const GatedActivation& act) {
                moe_quantize_int8_activation(act, gu.col_slice(0, I), gu.col_slice(I, I), hq, stream);
              },
              [&](const DeviceTensor& hs) { moe_quantize_int8_rows(hs, hq, stream); }, stream);
        }
        // The routed experts of a decode step as the model runs them (gather, quantisation, GEMM 1,
        // activation + quantisation in one pass, GEMM 2), and with the activation as its own kernel.
        if (g.gemm == 2 && g.T <= 64) {
          for (const Banks& b : banks) {
            const std::string scheme = b.group_size > 0 ? "g" + std::to_string(b.group_size) : "chan";
            for (bool apart : {false, true}) {
              vs.push_back({scheme + (apart ? " chain, act apart" : " decode chain"),
                            g.rt.hit * 3.0 * I * H * (0.5 + 4.0 / static_cast<double>(b.g2.group())), [&, b, apart](int i) {
                              const MoeDispatch& d = g.rt.d[i % kRoutings];
                              const DeviceTensor xs = l.xs.row_slice(0, g.R), gu = l.gu.row_slice(0, g.R);
                              moe_gather(l.x.row_slice(0, g.T), d, xs, stream);
                              moe_quantize_int8_rows(xs, xq, stream);
                              moe_grouped_gemm_w4a8(xq, b.g1, d, gu, stream);
                              if (apart) {
                                gated_activation(k3_situ(), gu.col_slice(0, I), gu.col_slice(I, I), g.in, stream);
                                moe_quantize_int8_rows(g.in, hq, stream);
                              } else {
                                moe_quantize_int8_activation(k3_situ(), gu.col_slice(0, I), gu.col_slice(I, I), hq, stream);
                              }
                              moe_grouped_gemm_w4a8(hq, b.g2, d, g.out, stream);
                            }});
            }
          }
        }
        for (const Banks& b : banks) {
          const MoeW4A8Bank& w = g.gemm == 1 ? b.g1 : b.g2;
          const std::string scheme = b.group_size > 0 ? "g" + std::to_string(b.group_size) : "chan";
          for (MoeTile tile : kAllTiles) {
            vs.push_back({scheme + " " + tile_label(tile, moe_w4a8_tile_for(g.R, E, w.groups() > 1)),
                          g.rt.hit * g.N * g.K * (0.5 + 4.0 / static_cast<double>(w.group())),
                          [&, w, tile](int i) { moe_grouped_gemm_w4a8(inq, w, g.rt.d[i % kRoutings], g.out, stream, tile); }});
          }
        }
        return vs;
      });
  arena.reset(mark);
}

// ---- MoE, GGUF experts -------------------------------------------------------------------------------

// GGUF routed experts (quant/formats/ggml/cuda/moe_ggml.h): the decode grouped GEMV (quantisation of the sorted rows
// included) at 1, 2, 3, 4 and 8 weight rows per warp, the quantisation alone, and from 512 tokens on the
// prefill GEMM (moe_grouped_gemm_ggml, both tile heights; "auto" marks the model's choice), banks of
// random bytes (the values do not change the kernels' work), T = 1, 8, 64 (--tokens: others); target
// >= 2.5 TB/s on the packed bytes of the experts hit at decode.
// --moe-ggml's formats (--ggml-types q2_K,q4_K, ggml's spelling: fewer banks, e.g. under a profiler's memory replay).
std::vector<GgmlType> g_ggml_types = {GgmlType::Q4_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_0, GgmlType::Q8_0};

void bench_moe_ggml(Arena& arena, Stream& stream, const RandomPool& bf16_pool) {
  const int64_t E = MoeLayer::E, H = MoeLayer::H, I = MoeLayer::I;
  const std::vector<GgmlType>& types = g_ggml_types;
  print_moe_layer_header("GGUF experts (decode GEMV, int8 activations x GGML blocks, dp4a; gemv includes the"
                         " quantisation, quant alone below; prefill: mma = bf16 tensor-core GEMM over weights decoded"
                         " in shared memory)",
                         "packed GGUF bytes");
  MoeLayer l;
  l.tokens = {1, 8, 64};
  if (!g_tokens.empty()) l.tokens = g_tokens;
  double bank_bytes = 0, acts = 0;
  for (GgmlType t : types) {
    const GgmlTypeInfo& info = ggml_type_info(t);
    bank_bytes += 3.0 * E * I * H / info.block_size * info.type_size;
    acts += 2.0 * moe_ggml_acts_bytes(t, l.r_max(), H);
  }
  const size_t mark = arena.mark();
  if (!moe_layer_fits(arena, l, bank_bytes, acts, false)) return;
  alloc_moe_layer(arena, bf16_pool, l);
  const std::vector<float> ones(static_cast<size_t>(l.r_max()), 1.0f);
  const float* unit_row_weights = upload_f32(arena, ones.data(), 1, l.r_max(), DType::kF32, "row weights").as<const float>();
  struct Banks {
    GgmlType type;
    MoeGgmlBank g1, g2;
    MoeGgmlActs a1, a2;
  };
  std::vector<Banks> banks;
  for (GgmlType t : types) {
    Banks b{t, moe_ggml_alloc(arena, t, E, 2 * I, H, "moe ggml w1|w3"), moe_ggml_alloc(arena, t, E, H, I, "moe ggml w2"),
            {}, {}};
    bf16_pool.fill(b.g1.data, b.g1.bytes(), 51 + banks.size());
    bf16_pool.fill(b.g2.data, b.g2.bytes(), 53 + banks.size());
    banks.push_back(b);
  }
  run_moe_layer(
      arena, stream, l,
      [&](int64_t, int64_t R, const Routings&) {
        for (Banks& b : banks) {
          b.a1 = moe_ggml_acts_view(arena.alloc(moe_ggml_acts_bytes(b.type, R, H), "acts 1"), b.type, R, H);
          b.a2 = moe_ggml_acts_view(arena.alloc(moe_ggml_acts_bytes(b.type, R, I), "acts 2"), b.type, R, I);
        }
      },
      [&](const MoeGemm& g) {
        std::vector<MoeVariant> vs;
        for (const Banks& b : banks) {
          const MoeGgmlBank& w = g.gemm == 1 ? b.g1 : b.g2;
          const MoeGgmlActs& a = g.gemm == 1 ? b.a1 : b.a2;
          const std::string name(ggml_type_name(b.type));
          const MoeTile model_tile = moe_ggml_tile_for(b.type, g.R, E, w.n);
          for (int rw : {1, 2, 3, 4, 8}) {
            if (!moe_ggml_gemv_supports(b.type, rw)) continue;
            const bool is_auto = model_tile == MoeTile::kM16 && rw == moe_ggml_gemv_rows_per_warp(b.type, w.k);
            const std::string label = " rw" + std::to_string(rw) + (is_auto ? " (auto)" : "");
            vs.push_back({name + label, g.rt.hit * w.n * w.row_bytes(), [&, w, a, rw](int i) {
                            moe_grouped_gemv_ggml(g.in, w, g.rt.d[i % kRoutings], a, g.out, stream, rw);
                          }});
          }
          vs.push_back({name + " quant", 0.0, [&, a](int) { moe_ggml_quantize(g.in, a, stream); }});
          if (g.gemm == 2 && model_tile == MoeTile::kM16) {  // as the model runs it: routing weights in the epilogue
            vs.push_back({name + " auto+weights", g.rt.hit * w.n * w.row_bytes(), [&, w, a](int i) {
                            moe_grouped_gemv_ggml(g.in, w, moe_weighted(g.rt.d[i % kRoutings], unit_row_weights), a, g.out,
                                                  stream);
                          }});
          }
          if (g.gemm == 2) {
            const DeviceTensor gu = l.gu.row_slice(0, g.R);
            push_gemm2_input_variants(
                vs, name + " situ", gu, g.in,
                [&, gu, a](const GatedActivation& act) {
                  moe_ggml_quantize_activation(act, gu.col_slice(0, I), gu.col_slice(I, I), a, stream);
                },
                [&, a](const DeviceTensor& hs) { moe_ggml_quantize(hs, a, stream); }, stream);
          }
          // The routed experts of a decode step as the model runs them (gather, quantisation, GEMV 1,
          // activation + quantisation in one pass, GEMV 2), and with the activation as its own kernel.
          if (g.gemm == 2 && g.T <= 64) {
            for (bool apart : {false, true}) {
              vs.push_back({name + (apart ? " chain, act apart" : " decode chain"),
                            g.rt.hit * (b.g1.n * b.g1.row_bytes() + b.g2.n * b.g2.row_bytes()), [&, b, apart](int i) {
                              const MoeDispatch& d = g.rt.d[i % kRoutings];
                              const DeviceTensor xs = l.xs.row_slice(0, g.R), gu = l.gu.row_slice(0, g.R);
                              moe_gather(l.x.row_slice(0, g.T), d, xs, stream);
                              moe_ggml_quantize(xs, b.a1, stream);
                              moe_grouped_gemv_ggml(b.a1, b.g1, d, gu, stream);
                              if (apart) {
                                gated_activation(k3_situ(), gu.col_slice(0, I), gu.col_slice(I, I), g.in, stream);
                                moe_ggml_quantize(g.in, b.a2, stream);
                              } else {
                                moe_ggml_quantize_activation(k3_situ(), gu.col_slice(0, I), gu.col_slice(I, I), b.a2, stream);
                              }
                              moe_grouped_gemv_ggml(b.a2, b.g2, d, g.out, stream);
                            }});
            }
          }
          if (g.R < 512 * MoeLayer::k) continue;
          for (MoeTile tile : {MoeTile::kM64, MoeTile::kM128}) {
            const std::string label = " mma m" + std::to_string(moe_tile_rows(tile)) + (tile == model_tile ? " (auto)" : "");
            vs.push_back({name + label, g.rt.hit * w.n * w.row_bytes(), [&, w, tile](int i) {
                            moe_grouped_gemm_ggml(g.in, w, g.rt.d[i % kRoutings], g.out, stream, tile);
                          }});
          }
        }
        return vs;
      });
  arena.reset(mark);
}

int run(int argc, char** argv) {
  std::string arena_size = "75%";  // the Kimi-K3 MoE banks alone take 59 GB
  bool moe_ggml_only = false;
  bool quick = false, moe_only = false, moe_tiles = false, memory_only = false, gemv_only = false,
       moe_w4_only = false, moe_w4a8_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      g_reps = std::max(3, std::atoi(argv[++i]));
    } else if (a == "--arena" && i + 1 < argc) {
      arena_size = argv[++i];
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--tokens" && i + 1 < argc) {
      g_tokens.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const long long t = std::strtoll(p, &end, 10);
        if (end == p || t <= 0 || (*end != ',' && *end != '\0')) {
          std::fprintf(stderr, "k3_bench_cuda: --tokens wants a list like 1,8,4096, got '%s'\n", argv[i]);
          return 2;
        }
        g_tokens.push_back(t);
        p = *end == ',' ? end + 1 : end;
      }
      std::sort(g_tokens.begin(), g_tokens.end());  // the MoE benches size their buffers by the last count
    } else if (a == "--moe") {
      moe_only = true;
    } else if (a == "--moe-tiles") {
      moe_tiles = true;
    } else if (a == "--moe-w4") {
      moe_w4_only = true;
    } else if (a == "--moe-w4a8") {
      moe_w4a8_only = true;
    } else if (a == "--moe-ggml") {
      moe_ggml_only = true;
    } else if (a == "--ggml-types" && i + 1 < argc) {
      g_ggml_types.clear();
      const std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t end = std::min(list.find(',', at), list.size());
        const GgmlTypeInfo* info = find_ggml_type(std::string_view(list).substr(at, end - at));
        if (info == nullptr || !moe_ggml_gemv_supports(info->type, 4)) {
          std::fprintf(stderr, "k3_bench_cuda: --ggml-types: unknown or unsupported type in '%s'\n", list.c_str());
          return 2;
        }
        g_ggml_types.push_back(info->type);
        at = end + 1;
      }
    } else if (a == "--memory") {
      memory_only = true;
    } else if (a == "--gemv") {
      gemv_only = true;
    } else {
      std::fprintf(stderr, "usage: k3_bench_cuda [--reps N] [--arena SIZE] [--quick] [--tokens T,T,...] [--moe] [--moe-tiles] [--memory] [--gemv] [--moe-w4] [--moe-w4a8] [--moe-ggml [--ggml-types T,T]]\n");
      return 2;
    }
  }
  const auto devices = list_devices();
  if (devices.empty()) {
    std::printf("k3_bench_cuda: no CUDA device, nothing to measure\n");
    return 0;
  }
  K3_CUDA_CHECK(cudaSetDevice(0));
  size_t free_b = 0, total_b = 0;
  K3_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  std::printf("device: %s, sm_%d%d, %d SMs, %.1f GiB; reps %d\n", devices[0].name.c_str(), devices[0].major,
              devices[0].minor, devices[0].multiprocessors, static_cast<double>(total_b) / (1 << 30), g_reps);
  Arena arena(0, parse_arena_size(arena_size, free_b, "--arena"));
  Stream stream;
  Blas blas(arena);
  const RandomPool fp8_pool(arena, DType::kE4M3, size_t{64} << 20);
  const RandomPool bf16_pool(arena, DType::kBF16, size_t{64} << 20);
  if (gemv_only) {
    bench_gemv(arena, blas, stream, bf16_pool);
    return 0;
  }
  if (memory_only) {
    bench_ceilings(arena, blas, stream, fp8_pool, bf16_pool, false);
    bench_memory_bound(arena, stream, bf16_pool);
    return 0;
  }
  if (moe_ggml_only) {
    bench_moe_ggml(arena, stream, bf16_pool);
    return 0;
  }
  if (moe_w4_only) {
    bench_moe_w4(arena, stream, bf16_pool, quick);
    return 0;
  }
  if (moe_w4a8_only) {
    bench_moe_w4a8(arena, stream, bf16_pool);
    return 0;
  }
  if (!moe_only) {
    bench_ceilings(arena, blas, stream, fp8_pool, bf16_pool, true);
    bench_memory_bound(arena, stream, bf16_pool);
    const std::vector<Shape> shapes = {{"q/k/v/g", 12288, 7168}, {"o", 7168, 12288}, {"q_b", 18432, 1536}};
    const std::vector<int64_t> ms =
        quick ? std::vector<int64_t>{1, 1024} : std::vector<int64_t>{1, 8, 64, 256, 1024, 4096, 8192};
    bench_gemms(arena, blas, stream, fp8_pool, bf16_pool, shapes, ms);
    bench_gemv(arena, blas, stream, bf16_pool);
  }
  bench_moe(arena, stream, bf16_pool, moe_tiles);
  std::printf("\narena peak %.2f GiB; GEMM plans cached: %zu\n", static_cast<double>(arena.peak()) / (1 << 30),
              blas.plan_count());
  return 0;
}

}  // namespace
}  // namespace k3::cuda

int main(int argc, char** argv) {
  try {
    return k3::cuda::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3_bench_cuda: %s\n", e.what());
    return 1;
  }
}
