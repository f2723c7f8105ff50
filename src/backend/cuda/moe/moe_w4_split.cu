// The sum of the split-K decode kernel's partial sums (launch_split_sum, moe_w4_internal.h): one
// format-independent kernel, so it is built once here rather than in each format's decode unit.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/attention/mla/mla_util.cuh"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/launch.h"
#include "backend/cuda/moe/moe_w4_internal.h"
#include "backend/cuda/moe/moe_w4_layout.h"

namespace k3::cuda::w4 {
namespace {

constexpr int kSumThreads = 256;

// One thread per 4 adjacent columns of one sorted row (N % 16 == 0, so they share a row and a part,
// and part's rows are 16-byte aligned).
template <typename Tout>
__global__ void __launch_bounds__(kSumThreads) moe_w4_split_sum_kernel(GemmArgs a, DecodeSplit sp, int experts) {
  // A programmatic dependent of the decode kernel (which lets its dependents launch before it writes
  // `part`): nothing is read before that kernel has completed.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  const int N = a.n, n4 = N / 4;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x;
  if (i >= sp.rows * n4) return;
  const int r = static_cast<int>(i / n4), f = static_cast<int>(i - static_cast<int64_t>(r) * n4) * 4;
  const int32_t* off = a.offsets;
  if (r < off[0] || r >= off[experts]) return;  // a row no expert covers (a skipped pick)
  // The expert of r: the last e with off[e] <= r (off[e] <= r < off[e + 1]; empty experts skipped).
  int lo = 0, hi = experts;
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (off[mid] <= r) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const size_t plane = static_cast<size_t>(sp.rows) * N;
  const float* p = sp.part + static_cast<size_t>(r) * N + f;
  float4 sum = *reinterpret_cast<const float4*>(p);
  for (int s = 1; s < sp.splits; ++s) {
    const float4 v = *reinterpret_cast<const float4*>(p + s * plane);
    sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
  }
  // The unsplit kernel's epilogue scale, in its order of operations.
  float scale = static_cast<float>(1 << kOffsetLog2) * a.out_scale[lo * a.parts + f / a.part_rows];
  if (a.row_weight != nullptr) scale *= a.row_weight[r];
  Tout* y = static_cast<Tout*>(a.y) + static_cast<int64_t>(r) * a.ldy + f;
  mla_detail::store_val(y, sum.x * scale);
  mla_detail::store_val(y + 1, sum.y * scale);
  mla_detail::store_val(y + 2, sum.z * scale);
  mla_detail::store_val(y + 3, sum.w * scale);
}

}  // namespace

void launch_split_sum(bool f32_out, const GemmArgs& a, const DecodeSplit& sp, int experts, cudaStream_t stream) {
  const int64_t threads = sp.rows * (a.n / 4);
  if (threads <= 0 || sp.splits <= 1) return;
  const int64_t blocks = (threads + kSumThreads - 1) / kSumThreads;
  if (blocks > INT32_MAX) throw Error("moe_grouped_gemm_w4: split sum grid too large");
  const dim3 grid(static_cast<unsigned>(blocks)), block(kSumThreads);
  if (f32_out) {
    launch_dependent(moe_w4_split_sum_kernel<float>, grid, block, 0, stream, a, sp, experts);
  } else {
    launch_dependent(moe_w4_split_sum_kernel<mla_detail::bf16>, grid, block, 0, stream, a, sp, experts);
  }
}

}  // namespace k3::cuda::w4
