#include "backend/cuda/executor/rank_exchange.h"

#include "backend/cuda/core/check.h"
#include "backend/cuda/executor/rows.h"
#include "core/error.h"
#include "parallel/sharding.h"

namespace k3::cuda {
namespace {

// rows × width bytes between row pitches (device or host memory, as `kind` says).
void copy_rows_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows, cudaMemcpyKind kind,
                  cudaStream_t stream) {
  if (rows > 0 && width > 0) K3_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, kind, stream));
}

}  // namespace

void RoutedSumAcrossRanks::all_reduce(const DeviceTensor& routed, Arena& arena, cudaStream_t stream) {
  expect_dtype(routed, DType::kF32, "expert-parallel routed sum");
  if (!routed.contiguous()) throw Error("expert-parallel routed sum: needs contiguous rows, got " + routed.describe());
  const size_t bytes = static_cast<size_t>(routed.numel()) * sizeof(float);
  if (DeviceCollectives* device = ranks_.device_collectives()) {
    // Every rank's partial sums side by side, then added in rank order as the host path adds them.
    const size_t mark = arena.mark();
    const int n = ranks_.size();
    const DeviceTensor all = arena.alloc_tensor(DType::kF32, routed.rows * n, routed.cols, "expert-parallel partial sums");
    device->all_gather_device(routed.data, all.data, bytes, stream);
    K3_CUDA_CHECK(cudaMemcpyAsync(routed.data, all.data, bytes, cudaMemcpyDeviceToDevice, stream));
    for (int q = 1; q < n; ++q) add_rows(routed, all.row_slice(q * routed.rows, routed.rows), stream);
    K3_CUDA_CHECK(cudaStreamSynchronize(stream));
    arena.reset(mark);
    return;
  }
  host_.resize(static_cast<size_t>(routed.numel()));
  K3_CUDA_CHECK(cudaMemcpyAsync(host_.data(), routed.data, bytes, cudaMemcpyDeviceToHost, stream));
  K3_CUDA_CHECK(cudaStreamSynchronize(stream));
  ranks_.all_reduce(host_, ReduceOp::kSum);
  K3_CUDA_CHECK(cudaMemcpyAsync(routed.data, host_.data(), bytes, cudaMemcpyHostToDevice, stream));
  K3_CUDA_CHECK(cudaStreamSynchronize(stream));  // host_ is reused by the next layer
}

void HeadsAcrossRanks::all_gather(const DeviceTensor& mine, const DeviceTensor& whole, int64_t unit, Arena& arena,
                                  cudaStream_t stream) {
  if (mine.dtype != whole.dtype || mine.rows != whole.rows || unit <= 0 || whole.cols % unit != 0) {
    throw Error("tensor-parallel heads: cannot gather " + mine.describe() + " into " + whole.describe() + " in groups of " +
                std::to_string(unit));
  }
  const size_t elem = dtype_size(mine.dtype), rows = static_cast<size_t>(mine.rows);
  const size_t mine_row = static_cast<size_t>(mine.cols) * elem, whole_row = static_cast<size_t>(whole.cols) * elem;
  if (DeviceCollectives* device = ranks_.device_collectives()) {
    // Rows padded to the widest share (equal blocks), gathered, then each rank's block to its columns.
    const size_t mark = arena.mark();
    const int64_t n = ranks_.size(), groups = whole.cols / unit;
    const size_t widest = static_cast<size_t>(gathered_share_columns(groups, n, unit)) * elem, block = rows * widest;
    auto* padded = static_cast<std::byte*>(arena.alloc(block, "tensor-parallel heads, padded"));
    auto* all = static_cast<std::byte*>(arena.alloc(block * static_cast<size_t>(n), "tensor-parallel heads, every rank's"));
    copy_rows_2d(padded, widest, mine.data, static_cast<size_t>(mine.ld) * elem, mine_row, rows, cudaMemcpyDeviceToDevice, stream);
    device->all_gather_device(padded, all, block, stream);
    for (int64_t q = 0; q < n; ++q) {
      const IndexRange part = split_range(groups, n, q);
      copy_rows_2d(static_cast<std::byte*>(whole.data) + static_cast<size_t>(part.first * unit) * elem,
                   static_cast<size_t>(whole.ld) * elem, all + static_cast<size_t>(q) * block, widest,
                   static_cast<size_t>(part.count * unit) * elem, rows, cudaMemcpyDeviceToDevice, stream);
    }
    K3_CUDA_CHECK(cudaStreamSynchronize(stream));
    arena.reset(mark);
    return;
  }
  mine_.resize(rows * mine_row);
  whole_.resize(rows * whole_row);
  copy_rows_2d(mine_.data(), mine_row, mine.data, static_cast<size_t>(mine.ld) * elem, mine_row, rows, cudaMemcpyDeviceToHost, stream);
  K3_CUDA_CHECK(cudaStreamSynchronize(stream));
  gather_column_groups(ranks_, mine_.data(), mine.rows, mine.cols, whole.cols, unit, elem, whole_.data());
  copy_rows_2d(whole.data, static_cast<size_t>(whole.ld) * elem, whole_.data(), whole_row, whole_row, rows, cudaMemcpyHostToDevice,
               stream);
  K3_CUDA_CHECK(cudaStreamSynchronize(stream));  // whole_ is reused by the next layer
}

}  // namespace k3::cuda
