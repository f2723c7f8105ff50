// The decode GEMV's kernels at token chunk 4 (moe_ggml_gemv.cuh): one translation unit per chunk.
#include "quant/formats/ggml/cuda/moe_ggml_gemv.cuh"

namespace k3::cuda::ggml_gemv {

template void gemv_launch<4>(GgmlType, bool, int, const GemvArgs&, int, unsigned, const MoeTileMap&, cudaStream_t);

}  // namespace k3::cuda::ggml_gemv
