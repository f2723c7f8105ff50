#include "bench_cuda_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/stream.h"
#include "backend/cuda/core/upload.h"
#include "core/numeric.h"

namespace k3::cuda::bench {

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

std::vector<double> time_interleaved(cudaStream_t stream,
                                     const std::vector<std::pair<const char*, std::function<void(int)>>>& fns) {
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

double try_time_ms(cudaStream_t stream, const char* what, const std::function<void(int)>& fn) {
  try {
    return time_ms(stream, fn);
  } catch (const std::exception& e) {
    std::printf("[%s failed: %s]\n", what, e.what());
    return std::nan("");
  }
}

RandomPool::RandomPool(Arena& arena, DType t, size_t bytes) : bytes_(bytes) {
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

void RandomPool::fill(void* dst, size_t bytes, size_t salt) const {
  size_t off = 0;
  size_t src = (salt * 4099 * 16) % (bytes_ / 2);
  while (off < bytes) {
    const size_t n = std::min(bytes - off, bytes_ - src);
    K3_CUDA_CHECK(cudaMemcpy(static_cast<char*>(dst) + off, data_ + src, n, cudaMemcpyDeviceToDevice));
    off += n;
    src = 0;
  }
}

}  // namespace k3::cuda::bench
