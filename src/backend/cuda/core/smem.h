// Dynamic shared memory above the default 48 KB per block. Host-only header.
#pragma once

#include <cstddef>

namespace k3::cuda {

// Lets `kernel` launch with `bytes` of dynamic shared memory on the current device: raises its
// cudaFuncAttributeMaxDynamicSharedMemorySize to at least `bytes` and never lowers it. A kernel whose
// size follows its shapes (K, the expert count) and that executors on several threads launch at once
// (ranks sharing a GPU) so never has its limit lowered under a launch of a larger size.
void allow_dynamic_smem(const void* kernel, size_t bytes);
template <typename... Params>
void allow_dynamic_smem(void (*kernel)(Params...), size_t bytes) {
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

}  // namespace k3::cuda
