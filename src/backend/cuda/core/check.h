// Every CUDA runtime call, cuBLAS(Lt) call and kernel launch goes through one of these macros: a
// failure becomes a k3::Error naming the call, the file and the line, e.g.
//   CUDA error cudaErrorInvalidValue (invalid argument) in cudaMemcpy(...) at src/x.cu:42
// Host-only header (no device code); usable from .cpp and .cu files.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace k3::cuda {

// The message every check throws; kept out of line so the macros stay small.
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

// "CUBLAS_STATUS_NOT_SUPPORTED" etc. (cublasLt has no name function of its own).
const char* cublas_status_name(cublasStatus_t status);

}  // namespace k3::cuda

#define K3_CUDA_CHECK(call)                                                            \
  do {                                                                                 \
    const cudaError_t k3_status_ = (call);                                             \
    if (k3_status_ != cudaSuccess) ::k3::cuda::throw_cuda_error(k3_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define K3_CUBLAS_CHECK(call)                                                          \
  do {                                                                                 \
    const cublasStatus_t k3_status_ = (call);                                          \
    if (k3_status_ != CUBLAS_STATUS_SUCCESS)                                           \
      ::k3::cuda::throw_cublas_error(k3_status_, #call, __FILE__, __LINE__);           \
  } while (0)

// After every <<<...>>> launch: a bad configuration (grid, block, shared memory) is reported by
// cudaGetLastError, which this also clears. Faults inside the kernel surface at the next
// synchronising call, which is itself checked. `name` names the kernel in the message.
#define K3_CUDA_CHECK_LAUNCH(name)                                                     \
  do {                                                                                 \
    const cudaError_t k3_status_ = cudaGetLastError();                                 \
    if (k3_status_ != cudaSuccess)                                                     \
      ::k3::cuda::throw_cuda_error(k3_status_, "launch of " name, __FILE__, __LINE__); \
  } while (0)
