// Multi-threaded GGML dequantization throughput per type on 256 MiB of packed input (beyond even
// a 300 MiB L3 once the float output is counted), next to this machine's memory bandwidth measured
// in the same binary on 2 GiB buffers:
//   bytes_per_second  packed input consumed
//   out_Bps           float32 output written
//   traffic_Bps       input + output, to compare with the read/write baselines
// Run: build/<dir>/bench/k3_bench_bench_dequant   (OMP_NUM_THREADS to pin the thread count)
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstring>
#include <memory>
#include <vector>

#include "quant/formats/ggml/ggml_dequant.h"

namespace {

using k3::GgmlType;

constexpr size_t kPackedBytes = 256ull << 20;
constexpr size_t kBaselineBytes = 2048ull << 20;

// A buffer whose pages are first touched by the threads that later use them.
template <class T>
std::unique_ptr<T[]> parallel_buffer(size_t n) {
  std::unique_ptr<T[]> p(new T[n]);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) p[i] = T{};
  return p;
}

// Random payload with finite, normal scales (byte offsets of each block's f16 scale fields).
struct Layout {
  GgmlType type;
  std::vector<size_t> f16_scales;
};

std::vector<uint8_t> packed_input(const Layout& layout, size_t n_blocks) {
  const auto& info = k3::ggml_type_info(layout.type);
  std::vector<uint8_t> bytes(n_blocks * info.type_size);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : bytes) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  if (layout.type == GgmlType::F16 || layout.type == GgmlType::BF16) {
    // keep every element a normal number: exponent bits away from 0 and all-ones
    const uint8_t top = layout.type == GgmlType::F16 ? 0x38 : 0x3E;
    for (size_t i = 1; i < bytes.size(); i += 2) bytes[i] = static_cast<uint8_t>((bytes[i] & 0x81) | top);
  }
  for (size_t blk = 0; blk < n_blocks; ++blk) {
    uint8_t* b = bytes.data() + blk * info.type_size;
    for (size_t off : layout.f16_scales) b[off] = 0x00, b[off + 1] = 0x2C;  // 2^-4
    if (layout.type == GgmlType::MXFP4) b[0] = 120;
  }
  return bytes;
}

void BM_Dequant(benchmark::State& state, Layout layout) {
  const auto& info = k3::ggml_type_info(layout.type);
  const size_t n_blocks = kPackedBytes / info.type_size;
  const int64_t n = static_cast<int64_t>(n_blocks * info.block_size);
  const std::vector<uint8_t> src = packed_input(layout, n_blocks);
  auto dst = parallel_buffer<float>(static_cast<size_t>(n));
  for (auto _ : state) {
    k3::dequantize_tensor(layout.type, src, dst.get(), n);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  const double in = static_cast<double>(src.size()), out = static_cast<double>(n) * 4;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * src.size()));
  state.counters["out_Bps"] = benchmark::Counter(out, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["traffic_Bps"] = benchmark::Counter(in + out, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = omp_get_max_threads();
  state.SetLabel(std::string(info.name));
}

// Memory read bandwidth: sum of a 2 GiB buffer with all threads.
void BM_MemoryRead(benchmark::State& state) {
  const size_t n = kBaselineBytes / 8;
  auto buf = parallel_buffer<uint64_t>(n);
  for (auto _ : state) {
    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (size_t i = 0; i < n; ++i) sum += buf[i];
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBaselineBytes));
  state.counters["threads"] = omp_get_max_threads();
}

// Memory write bandwidth: fill of a 2 GiB buffer with all threads (dequant output is writes).
void BM_MemoryWrite(benchmark::State& state) {
  const size_t n = kBaselineBytes / 4;
  auto buf = parallel_buffer<float>(n);
  float v = 1.0f;
  for (auto _ : state) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) buf[i] = v;
    v += 1.0f;
    benchmark::DoNotOptimize(buf.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBaselineBytes));
  state.counters["threads"] = omp_get_max_threads();
}

const Layout kLayouts[] = {
    {GgmlType::F32, {}},         {GgmlType::F16, {}},         {GgmlType::BF16, {}},
    {GgmlType::Q4_0, {0}},       {GgmlType::Q4_1, {0, 2}},    {GgmlType::Q5_0, {0}},
    {GgmlType::Q5_1, {0, 2}},    {GgmlType::Q8_0, {0}},       {GgmlType::Q2_K, {80, 82}},
    {GgmlType::Q3_K, {108}},     {GgmlType::Q4_K, {0, 2}},    {GgmlType::Q5_K, {0, 2}},
    {GgmlType::Q6_K, {208}},     {GgmlType::MXFP4, {}},
};

int register_all() {
  benchmark::RegisterBenchmark("MemoryRead", BM_MemoryRead)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("MemoryWrite", BM_MemoryWrite)->UseRealTime()->Unit(benchmark::kMillisecond);
  for (const Layout& l : kLayouts) {
    const std::string name = "Dequant/" + std::string(k3::ggml_type_name(l.type));
    benchmark::RegisterBenchmark(name.c_str(), BM_Dequant, l)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
