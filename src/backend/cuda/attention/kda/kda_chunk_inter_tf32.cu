// KDA chunked prefill, inter-chunk pass on tensor cores: WMMA tf32 operands, fp32 accumulation and
// fp32 state (kda_chunk_inter.cuh).
#include "backend/cuda/attention/kda/kda_chunk_inter.cuh"

namespace k3::cuda::kda_detail {

void launch_chunk_inter_tf32(const PrefillArgs& a, bool out_bf16, bool bulk_copy, cudaStream_t stream) {
  inter::launch<32, true>(a, out_bf16, bulk_copy, stream);
}

}  // namespace k3::cuda::kda_detail
