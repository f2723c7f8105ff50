// DeviceTensor: a non-owning view of a row-major 2-D matrix in device memory (the memory belongs to
// an Arena). Kernels take views and check dtype and shape on the host before launching.
// Host-only header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace k3::cuda {

enum class DType : uint8_t { kF32, kBF16, kE4M3, kU8, kI32 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kE4M3: return 1;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
  }
  return 0;
}

const char* dtype_name(DType t);

struct DeviceTensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  int64_t ld = 0;  // elements between the starts of consecutive rows (>= cols)

  DeviceTensor() = default;
  DeviceTensor(void* d, DType t, int64_t r, int64_t c, int64_t ld_ = -1)
      : data(d), dtype(t), rows(r), cols(c), ld(ld_ < 0 ? c : ld_) {}

  int64_t numel() const { return rows * cols; }
  size_t bytes() const { return static_cast<size_t>(rows > 0 ? (rows - 1) * ld + cols : 0) * dtype_size(dtype); }
  bool contiguous() const { return ld == cols; }
  // Rows [r0, r0 + n) / columns [c0, c0 + n) as a view of the same memory.
  DeviceTensor row_slice(int64_t r0, int64_t n) const;
  DeviceTensor col_slice(int64_t c0, int64_t n) const;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  std::string describe() const;  // "bf16[8, 7168] (ld 7168)"
};

// Throws k3::Error "<what>: expected <dtype>, got <dtype>" / shape mismatches.
void expect_dtype(const DeviceTensor& t, DType want, const char* what);
void expect_shape(const DeviceTensor& t, int64_t rows, int64_t cols, const char* what);

// True when every row of t starts on a 16-byte boundary (16-byte loads and cp.async of rows).
inline bool rows_aligned16(const DeviceTensor& t) {
  return (reinterpret_cast<uintptr_t>(t.data) % 16) == 0 && (t.ld * dtype_size(t.dtype)) % 16 == 0;
}

// rows_aligned16 and cols a multiple of 8, as the 8-wide vector kernels need.
inline bool vec8_ok(const DeviceTensor& t) { return t.cols % 8 == 0 && rows_aligned16(t); }

}  // namespace k3::cuda
