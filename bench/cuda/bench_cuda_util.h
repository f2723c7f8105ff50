// Shared by the sections of k3_bench_cuda (bench_cuda.cpp, bench_cuda_moe.cpp): the timing helpers,
// the device ceilings the tables are quoted against, the command-line settings every section reads,
// and the pool of random device data the benchmarks fill their buffers from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/core/arena.h"

namespace k3::cuda::bench {

constexpr double kReadCeilingTBs = 3.83;   // H200, read-only (docs/performance.md, ceilings)
constexpr double kBf16CeilingTF = 797.0;   // H200, cuBLASLt bf16 8192³, measured
constexpr double kFp8CeilingTF = 1332.0;   // H200, cuBLASLt block-scaled FP8 8192³, measured

inline int g_reps = 30;              // --reps
inline std::vector<int64_t> g_tokens;  // --tokens: the MoE benches' token counts instead of their defaults

// Median milliseconds of `reps` timed calls of fn(i) after 3 warm-up calls.
double time_ms(cudaStream_t stream, const std::function<void(int)>& fn);

// Several variants timed in interleaved rounds (A B C A B C …, each call between its own events), so
// a drift of the clock or the power state over the run hits them alike; the median of each. A
// variant that throws (say a GEMM cuBLASLt has no algorithm for) prints once and gives NaN.
std::vector<double> time_interleaved(cudaStream_t stream,
                                     const std::vector<std::pair<const char*, std::function<void(int)>>>& fns);

// time_ms, but a failure (say a GEMM cuBLASLt has no algorithm for) prints once and gives NaN, so
// the rest of the table still comes out.
double try_time_ms(cudaStream_t stream, const char* what, const std::function<void(int)>& fn);

// A device pool of random data (e4m3 codes of N(0,1) values, or bf16 of N(0,1)), copied into
// buffers at varying offsets: realistic bit patterns (never zeros) without host generation per
// buffer.
class RandomPool {
 public:
  RandomPool(Arena& arena, DType t, size_t bytes);
  void fill(void* dst, size_t bytes, size_t salt) const;

 private:
  size_t bytes_;
  char* data_ = nullptr;
};

}  // namespace k3::cuda::bench
