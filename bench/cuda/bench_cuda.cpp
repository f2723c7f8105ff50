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
// Q4_K, Q2_K, Q3_K, Q4_0 and Q8_0 banks at the Kimi-K3 layer shapes, T = 1, 8, 64, with 2, 3 and 4
// weight rows per warp; TB/s on the packed GGUF bytes of the experts hit (target 2.5).
//
// ModelSlim W4A8 experts (quant/formats/modelslim/cuda/moe_w4a8.h, --moe-w4a8): the same Kimi-K3 layer with int4 banks
// (per channel, and per group of 256) times int8 per-row activations; the quantisation kernel and each
// GEMM kernel (auto and every tile) timed interleaved with the bf16 grouped GEMM; TB/s on the packed
// bytes (codes + fp32 scales) of the experts hit, TOPS over real rows, speed-up over bf16.
//
// FP8-block experts (quant/formats/fp8/cuda/moe_fp8_block.h, --moe-fp8: this section only): the same
// Kimi-K3 layer with e4m3 banks (128×128 multipliers), the tile kernel and the decode kernel timed
// interleaved with the bf16 grouped GEMM (when the arena holds both); TB/s on the packed bytes.
//
// GGUF dense linears as a bank of one expert (bench_cuda_dense.cpp, --ggml-dense: this section only):
// the decode GEMV, the grouped prefill GEMM and the dequantise-then-cuBLASLt product over Q4_K, Q6_K
// and Q3_K at N 4096, K 7168, T = 8 … 4096, against cuBLASLt over the bf16 weight.
//
// Run: k3_bench_cuda [--reps N] [--arena 75%] [--quick] [--tokens T,T,...] [--moe] [--moe-tiles] [--memory] [--gemv] [--moe-w4] [--moe-w4a8] [--moe-fp8] [--moe-ggml [--ggml-types q2_K,q4_K]] [--ggml-dense]
//   --moe        the MoE section only;  --moe-tiles  time every grouped-GEMM tile height, not only kAuto
//   --memory     the copy ceiling and the memory-bound table only;  --gemv  the decode bf16 GEMMs only
//   --moe-w4     the 4-bit expert section only;  --moe-w4a8  the W4A8 expert section only
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/device.h"
#include "backend/cuda/core/stream.h"
#include "backend/cuda/core/upload.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/ops/ops.h"
#include "quant/formats/fp8/cuda/fp8_quant.h"
#include "backend/cuda/ops/ops_tuning.h"
#include "bench_cuda_moe.h"
#include "bench_cuda_util.h"
#include "quant/formats/ggml/cuda/moe_ggml.h"
#include "quant/formats/ggml/cuda/moe_ggml_tuning.h"

namespace k3::cuda::bench {
namespace {

constexpr size_t kRotateBytes = size_t{256} << 20;  // > 4× the L2

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
  // The greedy pick over Kimi-K3's vocabulary: 64 rows for bandwidth, one for a decode step's latency.
  const int64_t V = 163840;
  std::vector<float> vocab(static_cast<size_t>(64 * V));
  for (float& v : vocab) v = std::normal_distribution<float>(0.0f, 4.0f)(gen);
  const DeviceTensor vl = upload_f32(arena, vocab.data(), 64, V, DType::kF32, "vocabulary logits");
  int32_t* picks = arena.alloc_n<int32_t>(64, "picks");
  ms = time_ms(stream, [&](int) { row_argmax(vl, picks, stream); });
  print_bw("row_argmax f32", "64x" + std::to_string(V), 64.0 * V * 4, ms);
  ms = time_ms(stream, [&](int) { row_argmax(vl.row_slice(0, 1), picks, stream); });
  std::printf("%-26s %-22s %9s %9.1f   (latency)\n", "row_argmax", ("1x" + std::to_string(V)).c_str(), "", ms * 1e3);
  K3_CUDA_CHECK(cudaDeviceSynchronize());
  arena.reset(mark);
}

int run(int argc, char** argv) {
  std::string arena_size = "75%";  // the Kimi-K3 MoE banks alone take 59 GB
  // --moe-ggml's formats (--ggml-types q2_K,q4_K, ggml's spelling: fewer banks, e.g. under a profiler's memory replay).
  std::vector<GgmlType> ggml_types = {GgmlType::Q4_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_0, GgmlType::Q8_0};
  bool moe_ggml_only = false, ggml_dense_only = false;
  bool quick = false, moe_only = false, moe_tiles = false, memory_only = false, gemv_only = false,
       moe_w4_only = false, moe_w4a8_only = false, moe_fp8_only = false;
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
    } else if (a == "--moe-fp8") {
      moe_fp8_only = true;
    } else if (a == "--moe-ggml") {
      moe_ggml_only = true;
    } else if (a == "--ggml-dense") {
      ggml_dense_only = true;
    } else if (a == "--ggml-types" && i + 1 < argc) {
      ggml_types.clear();
      const std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t end = std::min(list.find(',', at), list.size());
        const GgmlTypeInfo* info = find_ggml_type(std::string_view(list).substr(at, end - at));
        if (info == nullptr || !moe_ggml_gemv_supports(info->type, 4)) {
          std::fprintf(stderr, "k3_bench_cuda: --ggml-types: unknown or unsupported type in '%s'\n", list.c_str());
          return 2;
        }
        ggml_types.push_back(info->type);
        at = end + 1;
      }
    } else if (a == "--memory") {
      memory_only = true;
    } else if (a == "--gemv") {
      gemv_only = true;
    } else {
      std::fprintf(stderr, "usage: k3_bench_cuda [--reps N] [--arena SIZE] [--quick] [--tokens T,T,...] [--moe] [--moe-tiles] [--memory] [--gemv] [--moe-w4] [--moe-w4a8] [--moe-fp8] [--moe-ggml [--ggml-types T,T]] [--ggml-dense]\n");
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
  if (ggml_dense_only) {
    bench_ggml_dense(arena, blas, stream, bf16_pool);
    return 0;
  }
  if (moe_ggml_only) {
    bench_moe_ggml(arena, stream, bf16_pool, ggml_types);
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
  if (moe_fp8_only) {
    bench_moe_fp8_block(arena, stream, fp8_pool, bf16_pool);
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
}  // namespace k3::cuda::bench

int main(int argc, char** argv) {
  try {
    return k3::cuda::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3_bench_cuda: %s\n", e.what());
    return 1;
  }
}
