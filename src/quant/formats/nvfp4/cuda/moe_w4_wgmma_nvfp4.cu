// The NVFP4 instantiation of the 4-bit expert grouped GEMM on warpgroup MMA (moe_w4_wgmma.cuh).
#include "backend/cuda/moe/moe_w4_wgmma.cuh"

namespace k3::cuda::w4 {

template void launch_wgmma<W4Format::kNvfp4>(bool, const WgmmaMaps&, const GemmArgs&, const MoeTileMap&, int,
                                          cudaStream_t);

}  // namespace k3::cuda::w4
