#include "backend/cuda/core/device.h"

#include <cuda_runtime.h>

#include "backend/cuda/core/check.h"

namespace k3::cuda {

int current_multiprocessors() {
  int dev = 0, sms = 0;
  K3_CUDA_CHECK(cudaGetDevice(&dev));
  K3_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

std::vector<DeviceInfo> list_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device / no driver" error
    return {};
  }
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    K3_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    out.push_back({i, prop.name, prop.major, prop.minor, prop.totalGlobalMem, prop.multiProcessorCount});
  }
  return out;
}

namespace {
__global__ void saxpy_kernel(float a, const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
}  // namespace

void saxpy(float a, const std::vector<float>& x, const std::vector<float>& y, std::vector<float>& out) {
  const int n = static_cast<int>(x.size());
  out.assign(x.size(), 0.0f);
  float *dx = nullptr, *dy = nullptr, *dout = nullptr;
  const size_t bytes = x.size() * sizeof(float);
  K3_CUDA_CHECK(cudaMalloc(&dx, bytes));
  K3_CUDA_CHECK(cudaMalloc(&dy, bytes));
  K3_CUDA_CHECK(cudaMalloc(&dout, bytes));
  K3_CUDA_CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
  K3_CUDA_CHECK(cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice));
  saxpy_kernel<<<(n + 255) / 256, 256>>>(a, dx, dy, dout, n);
  K3_CUDA_CHECK(cudaGetLastError());
  K3_CUDA_CHECK(cudaMemcpy(out.data(), dout, bytes, cudaMemcpyDeviceToHost));
  K3_CUDA_CHECK(cudaFree(dx));
  K3_CUDA_CHECK(cudaFree(dy));
  K3_CUDA_CHECK(cudaFree(dout));
}

}  // namespace k3::cuda
