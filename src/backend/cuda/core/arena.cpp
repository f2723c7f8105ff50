#include "backend/cuda/core/arena.h"

#include <cuda_runtime.h>

#include <charconv>
#include <cmath>
#include <cstdio>

#include "backend/cuda/core/check.h"

namespace k3::cuda {
namespace {

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

Arena::Arena(int device, size_t bytes) : device_(device), capacity_(bytes) {
  K3_CUDA_CHECK(cudaSetDevice(device));
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&base_, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error("CUDA arena: cannot allocate " + mib(bytes) + " on device " + std::to_string(device) + " (" +
                cudaGetErrorName(status) + "; " + mib(free_b) + " free of " + mib(total_b) + ")");
  }
}

Arena::~Arena() {
  if (base_ != nullptr) cudaFree(base_);  // no throw from a destructor
}

void* Arena::alloc(size_t bytes, const char* what, size_t align) {
  if (align == 0 || (align & (align - 1)) != 0) throw Error(std::string("CUDA arena: bad alignment for ") + what);
  // base_ is 256-aligned, so aligning the offset aligns the pointer (for align <= 256).
  const size_t start = (used_ + align - 1) & ~(align - 1);
  const size_t rounded = (bytes + kAlign - 1) & ~(kAlign - 1);
  if (start > capacity_ || rounded > capacity_ - start) {
    throw Error(std::string("CUDA arena exhausted: '") + what + "' needs " + mib(bytes) + ", " + mib(used_) +
                " of " + mib(capacity_) + " in use on device " + std::to_string(device_) +
                " (raise the arena size)");
  }
  used_ = start + rounded;
  if (used_ > peak_) peak_ = used_;
  return base_ + start;
}

DeviceTensor Arena::alloc_tensor(DType dtype, int64_t rows, int64_t cols, const char* what) {
  if (rows < 0 || cols < 0) throw Error(std::string("CUDA arena: negative shape for ") + what);
  void* p = alloc(static_cast<size_t>(rows * cols) * dtype_size(dtype), what);
  return {p, dtype, rows, cols};
}

void Arena::reset(size_t mark) {
  if (mark > used_) throw Error("CUDA arena: reset to a mark beyond the current use");
  used_ = mark;
}

size_t parse_arena_size(std::string_view text, size_t free_bytes, std::string_view flag) {
  auto bad = [&]() {
    return Error(std::string(flag) + ": '" + std::string(text) + "' is not a size (e.g. 80G, 512M, 90%)");
  };
  if (text.empty()) throw bad();
  double value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin || !(value >= 0) || !std::isfinite(value)) throw bad();
  const std::string_view suffix(ptr, static_cast<size_t>(end - ptr));
  double bytes = 0;
  if (suffix.empty()) {
    bytes = value;
  } else if (suffix == "K" || suffix == "k") {
    bytes = value * 1024.0;
  } else if (suffix == "M" || suffix == "m") {
    bytes = value * 1024.0 * 1024.0;
  } else if (suffix == "G" || suffix == "g") {
    bytes = value * 1024.0 * 1024.0 * 1024.0;
  } else if (suffix == "%") {
    if (value > 100) throw bad();
    bytes = static_cast<double>(free_bytes) * value / 100.0;
  } else {
    throw bad();
  }
  if (bytes > 1e18) throw bad();
  return static_cast<size_t>(bytes);
}

}  // namespace k3::cuda
