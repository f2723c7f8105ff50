#include "backend/cuda/core/upload.h"

#include <cuda_runtime.h>

#include <cstring>

#include "backend/cuda/core/check.h"
#include "core/numeric.h"

namespace k3::cuda {
namespace {

// Pageable host memory: cudaMemcpy may return before the DMA lands; the sync makes the data visible
// to work on every stream, including non-blocking ones.
void h2d(void* dst, const void* src, size_t bytes) {
  K3_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cudaStreamLegacy));
  K3_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void d2h(void* dst, const void* src, size_t bytes) {
  K3_CUDA_CHECK(cudaDeviceSynchronize());  // results of work on any stream
  K3_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void require_contiguous(const DeviceTensor& t, const char* what) {
  if (!t.contiguous()) throw Error(std::string(what) + ": needs a contiguous tensor, got " + t.describe());
}

}  // namespace

void copy_bytes_to_device(void* dst, const void* src, size_t bytes) { h2d(dst, src, bytes); }

DeviceTensor upload_f32(Arena& arena, const float* host, int64_t rows, int64_t cols, DType to, const char* what) {
  DeviceTensor t = arena.alloc_tensor(to, rows, cols, what);
  copy_to_device(host, t);
  return t;
}

void copy_to_device(const float* host, const DeviceTensor& dst) {
  require_contiguous(dst, "copy_to_device");
  const size_t n = static_cast<size_t>(dst.numel());
  if (dst.dtype == DType::kF32) {
    h2d(dst.data, host, n * sizeof(float));
  } else if (dst.dtype == DType::kBF16) {
    std::vector<uint16_t> bits(n);
    for (size_t i = 0; i < n; ++i) bits[i] = encode_bf16(host[i]);
    h2d(dst.data, bits.data(), n * sizeof(uint16_t));
  } else {
    throw Error(std::string("copy_to_device: floats cannot go to ") + dst.describe());
  }
}

DeviceTensor upload_bf16_bits(Arena& arena, const uint16_t* host, int64_t rows, int64_t cols, const char* what) {
  DeviceTensor t = arena.alloc_tensor(DType::kBF16, rows, cols, what);
  h2d(t.data, host, t.bytes());
  return t;
}

DeviceTensor upload_bytes(Arena& arena, const uint8_t* host, int64_t rows, int64_t cols, DType as, const char* what) {
  if (dtype_size(as) != 1) throw Error(std::string("upload_bytes: ") + what + " is not a byte type");
  DeviceTensor t = arena.alloc_tensor(as, rows, cols, what);
  h2d(t.data, host, t.bytes());
  return t;
}

std::vector<float> download_f32(const DeviceTensor& t) {
  require_contiguous(t, "download_f32");
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  switch (t.dtype) {
    case DType::kF32:
      d2h(out.data(), t.data, n * sizeof(float));
      break;
    case DType::kBF16: {
      std::vector<uint16_t> bits(n);
      d2h(bits.data(), t.data, n * sizeof(uint16_t));
      for (size_t i = 0; i < n; ++i) out[i] = decode_bf16(bits[i]);
      break;
    }
    case DType::kE4M3: {
      std::vector<uint8_t> codes(n);
      d2h(codes.data(), t.data, n);
      for (size_t i = 0; i < n; ++i) out[i] = decode_e4m3fn(codes[i]);
      break;
    }
    case DType::kU8: {
      std::vector<uint8_t> codes(n);
      d2h(codes.data(), t.data, n);
      for (size_t i = 0; i < n; ++i) out[i] = codes[i];
      break;
    }
    case DType::kI32: {
      std::vector<int32_t> v(n);
      d2h(v.data(), t.data, n * sizeof(int32_t));
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(v[i]);
      break;
    }
  }
  return out;
}

std::vector<uint8_t> download_bytes(const DeviceTensor& t) {
  require_contiguous(t, "download_bytes");
  std::vector<uint8_t> out(t.bytes());
  d2h(out.data(), t.data, out.size());
  return out;
}

std::vector<int32_t> download_i32(const DeviceTensor& t) {
  expect_dtype(t, DType::kI32, "download_i32");
  require_contiguous(t, "download_i32");
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  d2h(out.data(), t.data, out.size() * sizeof(int32_t));
  return out;
}

void poison(const DeviceTensor& t) {
  if (t.rows == 0 || t.cols == 0) return;
  const size_t es = dtype_size(t.dtype);
  K3_CUDA_CHECK(cudaMemset2D(t.data, static_cast<size_t>(t.ld) * es, 0xFF, static_cast<size_t>(t.cols) * es,
                             static_cast<size_t>(t.rows)));
  K3_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace k3::cuda
