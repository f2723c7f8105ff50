// GEMV (few tokens) through the CPU kernel driver (make_kernel_linear) on weight matrices far
// larger than the L3, next to the machine's streaming-read ceiling measured in the same run:
//   ceiling   OpenMP threads summing a --gib buffer with 512-bit (else 256-bit) loads;
//   per type  one forward() of m tokens over a --gib matrix, GB/s of packed weight bytes.
// Memory bandwidth drifts on shared machines, so the measurements are interleaved: every round
// runs the ceiling, then each type once, and the table reports medians over rounds, plus the
// median of the per-round ratio to that round's ceiling.
//
//   OMP_NUM_THREADS=2 OMP_PROC_BIND=close OMP_WAIT_POLICY=passive build/<dir>/bench/k3_bench_bench_cpu_gemv
//     [--types nvfp4,ct-mxfp4,q4_0,q2_K,q4_K,w4a8,w8a8,fp8-block,bf16,…|all] [--rounds 7] [--gib 1.5] [--m 1] [--k 8192] [--huge 1]
//     [--path auto|fused|tiles]
//
// With m > 1 the table also gives GFLOP/s (2·m·N·K per call); --path forces the driver's path
// (cpu_linear.h LinearPath) for A/B runs of the many-token kernels.
//
// Add a format to the table by appending a Candidate (name, factory, packed bytes) in main().
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/kernels/float_matrix.h"
#include "core/numeric.h"
#include "quant/formats/fp8/cpu/fp8_matrix.h"
#include "quant/formats/ggml/cpu/ggml_matrix.h"
#include "quant/formats/ggml/ggml_quantize.h"
#include "quant/formats/modelslim/cpu/modelslim_matrix.h"
#include "quant/formats/mxfp4/cpu/mxfp4_matrix.h"
#include "quant/formats/nvfp4/cpu/nvfp4_matrix.h"

namespace {

using k3::GgmlType;
using k3::cpu::WeightMatrix;
using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::string> types = {"q4_0", "q2_K", "q4_K"};
  int rounds = 7;
  double gib = 1.5;
  int64_t m = 1;
  int64_t k = 8192;
  bool huge = true;
  k3::cpu::LinearPath path = k3::cpu::LinearPath::kByTokens;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr, "bench_cpu_gemv: %s\nflags: --types a,b|all --rounds N --gib G --m M --k K --huge 0|1 --path auto|fused|tiles\n", msg);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + flag).c_str());
    const std::string v = argv[++i];
    if (flag == "--types") {
      o.types.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) o.types.push_back(t);
    } else if (flag == "--rounds") {
      o.rounds = std::stoi(v);
    } else if (flag == "--gib") {
      o.gib = std::stod(v);
    } else if (flag == "--m") {
      o.m = std::stoll(v);
    } else if (flag == "--k") {
      o.k = std::stoll(v);
    } else if (flag == "--huge") {
      o.huge = v != "0";
    } else if (flag == "--path") {
      if (v == "auto") o.path = k3::cpu::LinearPath::kByTokens;
      else if (v == "fused") o.path = k3::cpu::LinearPath::kFused;
      else if (v == "tiles") o.path = k3::cpu::LinearPath::kTiles;
      else usage("--path takes auto, fused or tiles");
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  if (o.rounds < 1 || o.gib <= 0 || o.m < 1 || o.k < 256 || o.k % 256 != 0) usage("bad value");
  return o;
}

// A 2 MiB-aligned buffer (transparent huge pages when asked), first touched by the threads that
// later stream it.
struct Buffer {
  uint8_t* p = nullptr;
  size_t n = 0;
  Buffer(size_t bytes, bool huge) : n(bytes) {
    constexpr size_t kAlign = 2u << 20;
    p = static_cast<uint8_t*>(std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
    if (p == nullptr) usage("out of memory");
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < bytes; i += 4096) p[i] = 0;
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// ---- the ceiling: streaming read with every thread ----------------------------------------

__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
  }
  return _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}

__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  alignas(32) uint64_t l[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return l[0] + l[1] + l[2] + l[3];
}

// Seconds for all threads to read the buffer once (each thread a contiguous share).
double stream_seconds(const Buffer& buf, bool avx512) {
  uint64_t total = 0;
  const auto t0 = Clock::now();
#pragma omp parallel reduction(+ : total)
  {
    const size_t threads = omp_get_num_threads(), id = omp_get_thread_num();
    const size_t per = buf.n / threads / 256 * 256;
    total += avx512 ? sum_avx512(buf.p + id * per, per) : sum_avx2(buf.p + id * per, per);
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (total == 42) std::puts("");  // keep the sum alive
  return s;
}

// ---- the compute ceiling: float32 FMAs from registers with every thread ---------------------

// One thread's 24 independent chains of 512-bit FMAs over `iterations` steps, unrolled so that every
// chain stays in its register; the asm barrier keeps each one live. (Measured on AVX-512 hosts only.)
__attribute__((target("avx512f"))) float fma_chains_512(int64_t iterations) {
  __m512 acc[24];
#pragma GCC unroll 24
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) {
      acc[i] = _mm512_fmadd_ps(acc[i], a, b);
      asm volatile("" : "+v"(acc[i]));
    }
  }
  float sink = 0;
#pragma GCC unroll 24
  for (int i = 0; i < 24; ++i) sink += _mm512_reduce_add_ps(acc[i]);
  return sink;
}

// GFLOP/s of all threads running their FMA chains at once.
double fma_gflops() {
  constexpr int64_t kIterations = 1 << 22;
  double sink = 0;
  const auto t0 = Clock::now();
#pragma omp parallel reduction(+ : sink)
  sink += fma_chains_512(kIterations);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (sink == 42) std::puts("");
  return 2.0 * 24 * 16 * static_cast<double>(kIterations) * omp_get_max_threads() / s / 1e9;
}

// ---- weights ------------------------------------------------------------------------------

// Valid rows of `type`: the project's quantizer on a small random matrix where it has one, else
// random payload bytes with sane f16 scales / mins (and E8M0 exponents near 1).
std::vector<uint8_t> tile_rows(GgmlType type, int64_t rows, int64_t k) {
  std::mt19937 rng(1234);
  if (k3::ggml_has_quantize(type)) {
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> w(static_cast<size_t>(rows * k));
    for (float& v : w) v = nd(rng);
    return k3::quantize_tensor(type, w, static_cast<uint64_t>(k));
  }
  const k3::GgmlTypeInfo& info = k3::ggml_type_info(type);
  const size_t nblocks = static_cast<size_t>(rows * k / info.block_size);
  std::vector<uint8_t> bytes(nblocks * info.type_size);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::vector<size_t> f16_fields;
  switch (type) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q5_K: f16_fields = {0, 2}; break;
    case GgmlType::Q5_0: f16_fields = {0}; break;
    default: break;
  }
  for (size_t i = 0; i < nblocks; ++i) {
    uint8_t* blk = bytes.data() + i * info.type_size;
    for (size_t off : f16_fields) {
      const uint16_t h = k3::encode_f16(0.001f + 0.001f * static_cast<float>(rng() % 16));
      std::memcpy(blk + off, &h, 2);
    }
    if (type == GgmlType::MXFP4) blk[0] = static_cast<uint8_t>(118 + rng() % 8);
  }
  return bytes;
}

struct Candidate {
  std::string name;
  std::function<std::unique_ptr<WeightMatrix>()> make;
  uint64_t bytes;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const size_t bytes = static_cast<size_t>(o.gib * (1ull << 30));
  const k3::cpu::CpuIsa isa = k3::cpu::selected_isa();

  std::vector<std::string> names = o.types;
  if (names.size() == 1 && names[0] == "all") {
    names = {"nvfp4", "ct-mxfp4", "w4a8", "q4_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_0", "mxfp4", "w8a8", "fp8-block", "bf16"};
  }

  // Packed GGML matrices of --gib each: a 64-row tile repeated.
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<Candidate> candidates;
  for (const std::string& name : names) {
    if (name == "w4a8" || name == "w8a8") {  // ModelSlim per channel, repacked at load; bytes: codes + f32 scale and offset per row
      const bool int4 = name == "w4a8";
      const int64_t rows = static_cast<int64_t>(bytes / static_cast<size_t>(int4 ? o.k / 2 : o.k)) / 64 * 64, k = o.k;
      auto codes = std::make_shared<std::vector<int8_t>>(static_cast<size_t>(int4 ? rows / 2 * k : rows * k));
      std::mt19937 r(1234);
      for (int8_t& c : *codes) c = static_cast<int8_t>(r());
      candidates.push_back({name, [=] {
                              const std::vector<float> scale(static_cast<size_t>(rows), 0.01f), zero(static_cast<size_t>(rows), 0.0f);
                              return int4 ? k3::cpu::make_w4a8_matrix(*codes, true, scale, {}, 0, rows, k, isa)
                                          : k3::cpu::make_w8a8_matrix(*codes, scale, zero, std::nullopt, rows, k, isa);
                            },
                            codes->size() + 8 * static_cast<uint64_t>(rows)});
      continue;
    }
    if (name == "nvfp4" || name == "ct-mxfp4") {  // repacked at load; bytes: codes + one scale byte per block
      const bool nvfp4 = name == "nvfp4";
      const int64_t block = nvfp4 ? 16 : 32, k = o.k;
      const int64_t rows = static_cast<int64_t>(bytes / static_cast<size_t>(k / 2 + k / block)) / 64 * 64;
      candidates.push_back({name, [=] {
                              std::vector<uint8_t> packed(static_cast<size_t>(rows * k / 2)), scales(static_cast<size_t>(rows * k / block));
                              std::mt19937 r(1234);
                              for (uint8_t& b : packed) b = static_cast<uint8_t>(r());
                              for (uint8_t& b : scales) b = static_cast<uint8_t>(nvfp4 ? 0x30 + r() % 8 : 120 + r() % 6);
                              return nvfp4 ? k3::cpu::make_nvfp4_matrix(packed, scales, 0.01f, rows, k, isa)
                                           : k3::cpu::make_mxfp4_matrix(packed, scales, rows, k, isa);
                            },
                            static_cast<uint64_t>(rows * (k / 2 + k / block))});
      continue;
    }
    if (name == "bf16" || name == "fp8-block") {  // read in place; fp8 adds one f32 per 128×128 tile
      const bool fp8 = name == "fp8-block";
      const int64_t k = o.k, rows = static_cast<int64_t>(bytes / static_cast<size_t>(fp8 ? k : 2 * k)) / 128 * 128;
      auto buf = std::make_unique<Buffer>(static_cast<size_t>(rows * k * (fp8 ? 1 : 2)), o.huge);
      uint8_t* dst = buf->p;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < static_cast<int64_t>(buf->n); i += 2) {
        dst[i] = static_cast<uint8_t>(i * 37);
        dst[i + 1] = fp8 ? static_cast<uint8_t>(i * 11 % 0x7E) : 0x3C;  // finite codes; bf16 in [2^-7, 2^-6)
      }
      const std::span<const uint8_t> span(buf->p, buf->n);
      const std::vector<float> tile_scale(static_cast<size_t>(rows / 128 * ((k + 127) / 128)), 0.01f);
      candidates.push_back({name, [=] {
                              return fp8 ? k3::cpu::make_fp8_matrix(span, tile_scale, 128, 128, rows, k, nullptr, isa)
                                         : k3::cpu::make_half_matrix(span, true, rows, k, nullptr, isa);
                            },
                            buf->n + (fp8 ? tile_scale.size() * 4 : 0)});
      buffers.push_back(std::move(buf));
      continue;
    }
    const k3::GgmlTypeInfo* info = k3::find_ggml_type(name);
    if (info == nullptr) usage(("unknown type " + name).c_str());
    const GgmlType type = info->type;
    const uint64_t row_bytes = k3::ggml_row_size(type, static_cast<uint64_t>(o.k));
    const int64_t rows = static_cast<int64_t>(bytes / row_bytes) / 64 * 64;
    const std::vector<uint8_t> tile = tile_rows(type, 64, o.k);
    auto buf = std::make_unique<Buffer>(static_cast<size_t>(rows) * row_bytes, o.huge);
    uint8_t* dst = buf->p;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r += 64) std::memcpy(dst + r * row_bytes, tile.data(), tile.size());
    const std::span<const uint8_t> span(buf->p, buf->n);
    const int64_t k = o.k;
    candidates.push_back({name, [=] { return k3::cpu::make_ggml_matrix(type, span, rows, k, nullptr, isa); }, buf->n});
    buffers.push_back(std::move(buf));
  }
  const Buffer stream(bytes, o.huge);

  struct Run {
    std::unique_ptr<k3::cpu::CpuLinear> linear;
    std::vector<float> x, y;
    std::vector<double> gbps, ratio, gflops;
  };
  const k3::cpu::ScopedLinearPath forced_path(o.path);
  std::vector<Run> runs;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Candidate& c : candidates) {
    Run run;
    run.linear = k3::cpu::make_kernel_linear(c.make());
    run.x.resize(static_cast<size_t>(o.m * o.k));
    for (float& v : run.x) v = nd(rng);
    run.y.resize(static_cast<size_t>(o.m * run.linear->rows()));
    run.linear->forward(run.x.data(), o.m, run.y.data());  // warm-up
    runs.push_back(std::move(run));
  }
  stream_seconds(stream, avx512);

  std::vector<double> ceiling, fma_peak;
  for (int round = 0; round < o.rounds; ++round) {
    const double roof = static_cast<double>(stream.n) / stream_seconds(stream, avx512) / 1e9;
    ceiling.push_back(roof);
    if (o.m > 1 && avx512) fma_peak.push_back(fma_gflops());
    for (size_t i = 0; i < runs.size(); ++i) {
      Run& run = runs[i];
      const auto t0 = Clock::now();
      run.linear->forward(run.x.data(), o.m, run.y.data());
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      const double gbps = static_cast<double>(candidates[i].bytes) / s / 1e9;
      run.gbps.push_back(gbps);
      run.gflops.push_back(2.0 * static_cast<double>(o.m * run.linear->rows() * run.linear->cols()) / s / 1e9);
      run.ratio.push_back(gbps / roof);
    }
  }

  std::printf("machine: %s, %d OpenMP threads, tier %s, huge pages %s\n", cpu_model().c_str(), omp_get_max_threads(),
              k3::cpu::isa_name(isa), o.huge ? "on" : "off");
  const char* path_name = o.path == k3::cpu::LinearPath::kFused ? "fused" : o.path == k3::cpu::LinearPath::kTiles ? "tiles" : "auto";
  std::printf("GEMV m=%lld, K=%lld, %.2f GiB per matrix, path %s, %d interleaved rounds, medians\n\n",
              static_cast<long long>(o.m), static_cast<long long>(o.k), o.gib, path_name, o.rounds);
  const double roof = median(ceiling);
  std::printf("%-8s %-22s %9s %9s %9s %9s %10s %10s %9s\n", "type", "kernel", "GiB", "GB/s", "min", "max", "%ceiling",
              "%per-round", "GFLOP/s");
  std::printf("%-8s %-22s %9.2f %9.1f %9.1f %9.1f %10s %10s %9s\n", "stream", avx512 ? "2 thr. 512-bit loads" : "256-bit loads",
              static_cast<double>(stream.n) / (1ull << 30), roof, *std::min_element(ceiling.begin(), ceiling.end()),
              *std::max_element(ceiling.begin(), ceiling.end()), "100", "100", "");
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    const double g = median(r.gbps);
    std::printf("%-8s %-22s %9.2f %9.1f %9.1f %9.1f %9.1f%% %9.1f%% %9.1f\n", candidates[i].name.c_str(),
                r.linear->kernel_name().c_str(), static_cast<double>(candidates[i].bytes) / (1ull << 30), g,
                *std::min_element(r.gbps.begin(), r.gbps.end()), *std::max_element(r.gbps.begin(), r.gbps.end()),
                100.0 * g / roof, 100.0 * median(r.ratio), median(r.gflops));
  }
  if (!fma_peak.empty()) {
    std::printf("\nfloat32 FMA ceiling (%d threads, 24 register chains of 512-bit FMAs): %.1f GFLOP/s (%.1f–%.1f)\n",
                omp_get_max_threads(), median(fma_peak),
                *std::min_element(fma_peak.begin(), fma_peak.end()), *std::max_element(fma_peak.begin(), fma_peak.end()));
  }
  return 0;
}
