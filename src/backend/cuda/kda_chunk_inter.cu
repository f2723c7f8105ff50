// KDA chunked prefill, inter-chunk pass in fp32 FMA (kda_chunk_inter.cuh).
#include "backend/cuda/kda_chunk_inter.cuh"

namespace k3::cuda::kda_detail {

void launch_chunk_inter_simt(const PrefillArgs& a, bool out_bf16, bool bulk_copy, cudaStream_t stream) {
  inter::launch<false>(a, out_bf16, bulk_copy, stream);
}

}  // namespace k3::cuda::kda_detail
