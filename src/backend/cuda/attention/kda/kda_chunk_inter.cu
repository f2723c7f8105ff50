// KDA chunked prefill, inter-chunk pass (kda_chunk_inter.cuh).
#include "backend/cuda/attention/kda/kda_chunk_inter.cuh"

namespace k3::cuda::kda_detail {

void launch_chunk_inter(const PrefillArgs& a, bool out_bf16, bool bulk_copy, int cols, cudaStream_t stream) {
  if (cols == 16) {
    inter::launch<16>(a, out_bf16, bulk_copy, stream);
  } else {
    inter::launch<32>(a, out_bf16, bulk_copy, stream);
  }
}

}  // namespace k3::cuda::kda_detail
