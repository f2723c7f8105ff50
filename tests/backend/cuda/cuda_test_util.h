// Shared helpers of the CUDA tests: skip without a device, one arena per process, fresh random
// inputs (the seed is printed so a failure can be replayed with K3_TEST_SEED), error norms.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/device.h"
#include "backend/cuda/core/upload.h"
#include "core/numeric.h"

#define K3_REQUIRE_GPU()                                                     \
  do {                                                                       \
    if (::k3::cuda::list_devices().empty()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace k3::cuda::test {

// Names parameterised cases by index. gtest prints struct parameters as raw bytes — padding and
// pointers included — which differ between ctest's test discovery and the run.
struct CaseIndexName {
  template <class T>
  std::string operator()(const ::testing::TestParamInfo<T>& info) const {
    return "case" + std::to_string(info.index);
  }
};

// One 4 GiB arena for the whole test process (created on first use, on device 0).
inline Arena& arena() {
  static std::unique_ptr<Arena> a = std::make_unique<Arena>(0, size_t{4} << 30);
  return *a;
}

// Gives back everything a test took from the arena.
class ArenaScope {
 public:
  ArenaScope() : mark_(arena().mark()) {}
  ~ArenaScope() { arena().reset(mark_); }

 private:
  size_t mark_;
};

inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("K3_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
}

// `fixed`, unless K3_TEST_SEED replays another seed.
inline uint64_t seed_or(uint64_t fixed) {
  if (const char* s = std::getenv("K3_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return fixed;
}

// A generator seeded freshly for each test (or with a given seed); the seed goes into the failure
// messages.
class Rng {
 public:
  Rng() : seed_(fresh_seed()), gen_(seed_) {}
  explicit Rng(uint64_t seed) : seed_(seed), gen_(seed) {}
  uint64_t seed() const { return seed_; }
  std::vector<float> normal(size_t n, float stddev = 1.0f) {
    std::normal_distribution<float> d(0.0f, stddev);
    std::vector<float> v(n);
    for (float& x : v) x = d(gen_);
    return v;
  }
  std::vector<float> uniform(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(gen_);
    return v;
  }
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }
  std::mt19937_64& gen() { return gen_; }

 private:
  uint64_t seed_;
  std::mt19937_64 gen_;
};

// An int32 vector as a [1, n] device tensor in the test arena.
inline DeviceTensor upload_i32(const std::vector<int32_t>& v, const char* what) {
  DeviceTensor t = arena().alloc_tensor(DType::kI32, 1, static_cast<int64_t>(v.size()), what);
  copy_bytes_to_device(t.data, v.data(), v.size() * sizeof(int32_t));
  return t;
}

inline float round_bf16(float x) { return decode_bf16(encode_bf16(x)); }
inline std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = round_bf16(x);
  return v;
}

struct ErrorStats {
  double rel_l2 = 0;     // ||out - ref|| / ||ref||
  double max_abs = 0;    // max |out - ref|
  double ref_rms = 0;
  int64_t non_finite = 0;
};

inline ErrorStats compare(const std::vector<float>& out, const std::vector<double>& ref) {
  ErrorStats s;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) {
      ++s.non_finite;
      continue;
    }
    const double d = out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    s.max_abs = std::max(s.max_abs, std::fabs(d));
  }
  s.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  s.ref_rms = std::sqrt(den / static_cast<double>(std::max<size_t>(1, out.size())));
  return s;
}

// Counts elements with |out - ref| > rel·|ref| + abs (non-finite outputs count too).
inline int64_t count_outside(const std::vector<float>& out, const std::vector<double>& ref, double rel, double abs) {
  int64_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]) || std::fabs(out[i] - ref[i]) > rel * std::fabs(ref[i]) + abs) ++bad;
  }
  return bad;
}

}  // namespace k3::cuda::test
