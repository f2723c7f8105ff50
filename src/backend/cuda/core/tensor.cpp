#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kE4M3: return "e4m3";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
  }
  return "?";
}

DeviceTensor DeviceTensor::row_slice(int64_t r0, int64_t n) const {
  if (r0 < 0 || n < 0 || r0 + n > rows) {
    throw Error("row slice [" + std::to_string(r0) + ", " + std::to_string(r0 + n) + ") of " + describe());
  }
  return {static_cast<char*>(data) + static_cast<size_t>(r0 * ld) * dtype_size(dtype), dtype, n, cols, ld};
}

DeviceTensor DeviceTensor::col_slice(int64_t c0, int64_t n) const {
  if (c0 < 0 || n < 0 || c0 + n > cols) {
    throw Error("column slice [" + std::to_string(c0) + ", " + std::to_string(c0 + n) + ") of " + describe());
  }
  return {static_cast<char*>(data) + static_cast<size_t>(c0) * dtype_size(dtype), dtype, rows, n, ld};
}

std::string DeviceTensor::describe() const {
  return std::string(dtype_name(dtype)) + "[" + std::to_string(rows) + ", " + std::to_string(cols) + "] (ld " +
         std::to_string(ld) + ")";
}

void expect_dtype(const DeviceTensor& t, DType want, const char* what) {
  if (t.dtype != want) {
    throw Error(std::string(what) + ": expected " + dtype_name(want) + ", got " + t.describe());
  }
}

void expect_shape(const DeviceTensor& t, int64_t rows, int64_t cols, const char* what) {
  if (t.rows != rows || t.cols != cols) {
    throw Error(std::string(what) + ": expected shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                "], got " + t.describe());
  }
}

}  // namespace k3::cuda
