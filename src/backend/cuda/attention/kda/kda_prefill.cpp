// KDA chunked prefill: argument checks and the two passes (kda_chunk_intra.cu, then
// kda_chunk_inter.cu) over the workspace of kda_internal.h.
#include <cmath>
#include <string>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/device.h"
#include "backend/cuda/attention/kda/kda.h"
#include "backend/cuda/attention/kda/kda_internal.h"
#include "backend/cuda/attention/kda/kda_tuning.h"
#include "core/error.h"

namespace k3::cuda {

using namespace kda_detail;

namespace {
// The sequential pass has one CTA per (sequence, head, column block): 16 columns when twice the
// CTAs of 32 still fit one wave (each chunk's chain is shorter: T = 2048, H = 12 takes 192 µs
// instead of 301 on the H200), else 32 (H = 32: 302 µs instead of 381).
int inter_cols(KdaInterCols cols, int64_t seq_heads) {
  if (cols != KdaInterCols::kAuto) return cols == KdaInterCols::k16 ? 16 : 32;
  return seq_heads * (D / 16) <= current_multiprocessors() ? 16 : 32;
}
}  // namespace

size_t kda_prefill_workspace_bytes(const KdaBatch& batch, int64_t heads) {
  return static_cast<size_t>(chunk_slots(batch) * heads) * kFloatsPerChunkHead * sizeof(float);
}

void kda_prefill(const KdaBatch& batch, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                 const DeviceTensor& f, const DeviceTensor& b, const KdaGate& gate, const KdaStatePool& pool,
                 void* workspace, const DeviceTensor& o, cudaStream_t stream, KdaLoads loads, KdaInterCols cols) {
  if (pool.head_dim != D) throw Error("kda_prefill: head dim " + std::to_string(pool.head_dim) + " is not built (128)");
  if (batch.cu_seqlens == nullptr) throw Error("kda_prefill: needs cu_seqlens");
  const int64_t H = pool.heads, P = pool.proj_dim(), T = batch.total_rows;
  expect_shape(q, T, P, "kda_prefill q");
  expect_shape(k, T, P, "kda_prefill k");
  expect_shape(v, T, P, "kda_prefill v");
  expect_shape(f, T, P, "kda_prefill f");
  expect_shape(o, T, P, "kda_prefill o");
  if (b.rows != T || b.cols < H) throw Error("kda_prefill b: expected [" + std::to_string(T) + ", >= H], got " + b.describe());
  const DType t = q.dtype;
  for (const DeviceTensor* x : {&k, &v, &f, &b}) expect_dtype(*x, t, "kda_prefill inputs (one dtype)");
  if (t != DType::kF32 && t != DType::kBF16) throw Error("kda_prefill: f32 or bf16 inputs, got " + q.describe());
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16) throw Error("kda_prefill: f32 or bf16 o, got " + o.describe());
  for (const DeviceTensor* x : {&q, &k, &f}) {
    if (!vec8_ok(*x)) throw Error("kda_prefill: needs 16-byte aligned rows, got " + x->describe());
  }
  if (gate.a_log == nullptr || gate.dt_bias == nullptr) throw Error("kda_prefill: gate parameters missing");
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0) throw Error("kda_prefill: workspace must be 16-byte aligned");
  if (batch.n == 0 || T == 0) return;
  PrefillArgs a{batch, q.data, q.ld, k.data, k.ld, v.data, v.ld, f.data, f.ld, b.data, b.ld, gate,
                1.0f / std::sqrt(static_cast<float>(D)), static_cast<int>(H), pool.recurrent,
                static_cast<float*>(workspace), o.data, o.ld};
  launch_chunk_intra(a, t == DType::kBF16, stream);
  const int ncols = inter_cols(cols, batch.n * H);
  // kAuto: cp.async tiles with 16 columns (T = 2048, H = 12: 321 vs 330 µs), bulk copies with 32 (~1 % ahead).
  const bool bulk_copy = loads == KdaLoads::kBulk || (loads == KdaLoads::kAuto && ncols == 32);
  launch_chunk_inter(a, o.dtype == DType::kBF16, bulk_copy, ncols, stream);
}

void kda_prefill(const KdaBatch& batch, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                 const DeviceTensor& f, const DeviceTensor& b, const KdaGate& gate, const KdaStatePool& pool,
                 void* workspace, const DeviceTensor& o, cudaStream_t stream) {
  kda_prefill(batch, q, k, v, f, b, gate, pool, workspace, o, stream, KdaLoads::kAuto, KdaInterCols::kAuto);
}

}  // namespace k3::cuda
