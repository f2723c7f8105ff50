// FP8 on the GPU (cuda_format.h): a dense linear keeps its e4m3 codes for cuBLASLt's FP8 GEMMs —
// 128×128 blocks with BLK128x128 scales (FP8_PB_WO), or one multiplier per tensor with the static
// activation scale (ModelOpt FP8) — where both dims are multiples of 16 (cuBLASLt's FP8 kernels;
// smaller projections such as β and gates go bf16). Routed FP8 experts are dequantised to bf16.
#include "backend/cuda/executor/cuda_format.h"
#include "backend/cuda/gemm/gemm.h"
#include "quant/plan/plan_files.h"

namespace k3::cuda {
namespace {

bool fp8_shape(const DeviceLinear& w) { return w.n % 16 == 0 && w.k % 16 == 0; }

// 128×128 blocks: linear_fp8_pb_wo.
class BlockLinear final : public DeviceLinearForm {
 public:
  explicit BlockLinear(const Fp8BlockWeight& w) : w_(w) {}
  void gemm(Blas& blas, Arena& arena, const DeviceTensor& x, const DeviceTensor& y, cudaStream_t stream) const override {
    linear_fp8_pb_wo(blas, arena, x, w_, y, stream);
  }

 private:
  Fp8BlockWeight w_;
};

// One multiplier per tensor and a static activation scale: linear_fp8_tensor.
class TensorLinear final : public DeviceLinearForm {
 public:
  TensorLinear(const Fp8TensorWeight& w, const float* input_scale) : w_(w), input_scale_(input_scale) {}
  void gemm(Blas& blas, Arena& arena, const DeviceTensor& x, const DeviceTensor& y, cudaStream_t stream) const override {
    linear_fp8_tensor(blas, arena, x, input_scale_, w_, y, stream);
  }

 private:
  Fp8TensorWeight w_;
  const float* input_scale_;  // device scalar
};

// Rows [rows.first, rows.end()) keep their 128×128 blocks when they start on a block row and end on
// one or at the last row.
bool block_linear(UploadContext& up, size_t i, const std::string& name, IndexRange rows, DeviceLinear& w) {
  const Binding& b = up.plan.bindings[i];
  if (!fp8_shape(w) || !b.layout_only() || b.scheme.block_n != 128 || b.scheme.block_k != 128) return false;
  const int64_t whole_rows = static_cast<int64_t>(up.plan.params[i].shape[0]);
  if (rows.first % 128 != 0 || (rows.end() % 128 != 0 && rows.end() != whole_rows)) return false;
  const SourceTensor& codes = b.source("weight");
  const std::vector<float> scales = decode_source(b.source("weight_scale"), up.files);
  const int64_t scale_cols = (w.k + 127) / 128;
  const Fp8BlockWeight block =
      upload_fp8_block_weight(up.arena, up.files.bytes(codes).data() + rows.first * w.k,
                              scales.data() + rows.first / 128 * scale_cols, w.n, w.k, name.c_str());
  up.bytes += block.codes.bytes() + ((w.n + 127) / 128) * block.scale_ld * sizeof(float);
  w.kind = DeviceLinear::Kind::kPacked;
  w.packed = std::make_shared<BlockLinear>(block);
  return true;
}

bool tensor_linear(UploadContext& up, size_t i, const std::string& name, IndexRange rows, DeviceLinear& w) {
  const Binding& b = up.plan.bindings[i];
  if (!fp8_shape(w) || !b.layout_only() || b.part("input_scale") == nullptr) return false;
  const Fp8TensorWeight tensor = upload_fp8_tensor_weight(up.arena, up.files.bytes(b.source("weight")).data() + rows.first * w.k,
                                                         scalar_source(b, "weight_scale", -1, up.files), w.n, w.k,
                                                         name.c_str());
  const float* input_scale = up.scalar(scalar_source(b, "input_scale", -1, up.files), name);
  up.bytes += tensor.codes.bytes() + sizeof(float);
  w.kind = DeviceLinear::Kind::kPacked;
  w.packed = std::make_shared<TensorLinear>(tensor, input_scale);
  return true;
}

}  // namespace

const CudaFormat cuda_format_fp8_tensor{tensor_linear};
const CudaFormat cuda_format_fp8_block{block_linear};

}  // namespace k3::cuda
