// The KDA forget gate on the device (kda.h KdaGate, spec §6.3), shared by the decode, chunked
// prefill and generic kernels: the log-decay g of channel input z = f~ + dt_bias with ea = exp(A_log[h]).
// Only included from .cu files.
#pragma once

#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/core/kernel_util.cuh"

namespace k3::cuda::detail {

__device__ __forceinline__ float kda_log_decay(const KdaGate& gate, float ea, float z) {
  if (gate.safe) return gate.lower_bound * sigmoid(ea * z);
  return -ea * (z > 20.0f ? z : log1pf(expf(z)));  // softplus, threshold 20
}

}  // namespace k3::cuda::detail
