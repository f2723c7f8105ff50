// Programmatic dependent launch (sm_90): a kernel launched with launch_dependent may start while the
// kernel before it on the stream is still running — as soon as every CTA of that kernel has executed
// griddepcontrol.launch_dependents (or exited). The dependent must execute griddepcontrol.wait (which
// returns once the kernel before it has completed and its writes are visible) before it reads what
// that kernel writes or writes what it reads; before the wait it may only prepare, e.g. stream weights
// that no kernel writes. On a stream without a running predecessor it behaves as a plain launch.
// Host-only header; launch from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/core/check.h"

namespace k3::cuda {

// A launch that is a programmatic dependent when `dependent`, else a plain one in stream order (the
// kernel's griddepcontrol instructions are then no-ops).
template <typename... Params, typename... Args>
void launch_kernel(bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                   cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream, cfg.attrs = attr, cfg.numAttrs = dependent ? 1 : 0;
  K3_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                      Args&&... args) {
  launch_kernel(true, kernel, grid, block, smem_bytes, stream, std::forward<Args>(args)...);
}

}  // namespace k3::cuda
