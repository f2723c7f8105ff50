// The NVFP4 instantiation of the 4-bit expert decode kernel (moe_w4_decode.cuh).
#include "backend/cuda/moe/moe_w4_decode.cuh"

namespace k3::cuda::w4 {

template void launch_decode<W4Format::kNvfp4>(DecodeShape, bool, const GemmArgs&, const DecodeSplit&, const MoeTileMap&,
                                              cudaStream_t);

}  // namespace k3::cuda::w4
