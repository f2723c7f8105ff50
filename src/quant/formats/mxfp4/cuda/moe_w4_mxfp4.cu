// The MXFP4 instantiation of the 4-bit expert grouped GEMM (moe_w4_gemm.cuh).
#include "backend/cuda/moe/moe_w4_gemm.cuh"

namespace k3::cuda::w4 {

template void launch_gemm<W4Format::kMxfp4>(MoeTile, bool, const GemmArgs&, const MoeTileMap&, cudaStream_t);

}  // namespace k3::cuda::w4
