#include "backend/cuda/core/smem.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/core/check.h"

namespace k3::cuda {

void allow_dynamic_smem(const void* kernel, size_t bytes) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, size_t> allowed;  // (device, kernel) → its attribute
  int device = 0;
  K3_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  size_t& now = allowed[{device, kernel}];
  if (bytes <= now) return;
  K3_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  now = bytes;
}

}  // namespace k3::cuda
