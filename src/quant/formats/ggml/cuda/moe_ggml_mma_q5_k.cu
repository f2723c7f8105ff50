// The Q5_K instantiation of the GGUF experts' prefill kernel (moe_ggml_mma.cuh).
#include "quant/formats/ggml/cuda/moe_ggml_mma.cuh"

namespace k3::cuda::ggml_mma {

template void launch<GgmlType::Q5_K>(MoeTile, bool, const Args&, const MoeTileMap&, cudaStream_t);

}  // namespace k3::cuda::ggml_mma
