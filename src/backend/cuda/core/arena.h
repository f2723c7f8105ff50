// One device-memory arena per device: a single cudaMalloc at start, then bump allocation. Nothing
// is freed one by one and nothing is allocated per token:
//   - weights and long-lived buffers are allocated once at load and stay;
//   - per-step scratch is taken after a mark() and given back with reset(mark).
// Scratch reuse is stream-ordered: memory handed back by reset() may be reused at once by the host,
// which is safe as long as every kernel that touches it runs on one stream (or the caller
// synchronises). Exhaustion throws a k3::Error saying what was asked for and how full the arena is.
// Host-only header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

class Arena {
 public:
  static constexpr size_t kAlign = 256;  // cudaMalloc's own alignment; enough for TMA / 16-byte vectors

  // Allocates `bytes` on `device` (made current for the call). Throws if the device lacks them.
  Arena(int device, size_t bytes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // `bytes` rounded up to `align` (a power of two, >= 1); `what` names the buffer in the error.
  void* alloc(size_t bytes, const char* what, size_t align = kAlign);
  template <typename T>
  T* alloc_n(size_t n, const char* what) {
    return static_cast<T*>(alloc(n * sizeof(T), what));
  }
  DeviceTensor alloc_tensor(DType dtype, int64_t rows, int64_t cols, const char* what);

  size_t mark() const { return used_; }
  void reset(size_t mark);  // frees everything allocated after mark()

  int device() const { return device_; }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }

 private:
  int device_ = 0;
  char* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0, peak_ = 0;
};

// Arena size from a flag value: "<n>" bytes, "<n>K|M|G" (binary units, fractions allowed: "1.5G"),
// or "<p>%" of the device's currently free memory. Throws k3::Error naming `flag` on bad input.
size_t parse_arena_size(std::string_view text, size_t free_bytes, std::string_view flag = "--gpu-memory");

}  // namespace k3::cuda
