// Dense (BF16 / F16 / F32) on the GPU (cuda_format.h): nothing of its own — linears and routed-expert
// banks take the uploader's bf16 form (BF16 bytes copied as stored, the rest rounded).
#include "backend/cuda/executor/cuda_format.h"

namespace k3::cuda {

const CudaFormat cuda_format_dense{};

}  // namespace k3::cuda
