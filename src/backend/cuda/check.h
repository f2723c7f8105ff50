// Every CUDA runtime call and launch goes through K3_CUDA_CHECK: a failure becomes a k3::Error
// naming the call, file and line.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

#define K3_CUDA_CHECK(call)                                                                    \
  do {                                                                                         \
    cudaError_t k3_status_ = (call);                                                           \
    if (k3_status_ != cudaSuccess) {                                                           \
      throw ::k3::Error(std::string("CUDA error ") + cudaGetErrorName(k3_status_) + " (" +    \
                        cudaGetErrorString(k3_status_) + ") in " #call " at " __FILE__ ":" + \
                        std::to_string(__LINE__));                                             \
    }                                                                                          \
  } while (0)
