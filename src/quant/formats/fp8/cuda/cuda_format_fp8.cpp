// FP8 on the GPU (cuda_format.h): a dense linear keeps its e4m3 codes for cuBLASLt's FP8 GEMMs —
// 128×128 blocks with BLK128x128 scales (FP8_PB_WO), or one multiplier per tensor with the static
// activation scale (ModelOpt FP8) — where both dims are multiples of 16 (cuBLASLt's FP8 kernels;
// smaller projections such as β and gates go bf16). Routed experts in 128×128 blocks stay packed for
// the FP8-block grouped GEMM (moe_fp8_block.h) where N % 128 == 0 and K % 8 == 0; per-tensor FP8
// experts are dequantised to bf16.
#include "backend/cuda/executor/cuda_format.h"
#include "backend/cuda/executor/step.h"
#include "backend/cuda/gemm/gemm.h"
#include "core/error.h"
#include "quant/formats/fp8/cuda/moe_fp8_block.h"
#include "quant/plan/plan_files.h"

namespace k3::cuda {
namespace {

bool fp8_shape(const DeviceLinear& w) { return w.n % 16 == 0 && w.k % 16 == 0; }

// 128×128 blocks: linear_fp8_pb_wo.
class BlockLinear final : public DeviceLinearForm {
 public:
  explicit BlockLinear(const Fp8BlockWeight& w) : w_(w) {}
  void gemm(StepContext& ctx, const DeviceTensor& x, const DeviceTensor& y) const override {
    linear_fp8_pb_wo(ctx.blas, ctx.arena, x, w_, y, ctx.stream);
  }

 private:
  Fp8BlockWeight w_;
};

// One multiplier per tensor and a static activation scale: linear_fp8_tensor.
class TensorLinear final : public DeviceLinearForm {
 public:
  TensorLinear(const Fp8TensorWeight& w, const float* input_scale) : w_(w), input_scale_(input_scale) {}
  void gemm(StepContext& ctx, const DeviceTensor& x, const DeviceTensor& y) const override {
    linear_fp8_tensor(ctx.blas, ctx.arena, x, input_scale_, w_, y, ctx.stream);
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

class Fp8BlockExpertBank final : public DeviceExpertBank {
 public:
  explicit Fp8BlockExpertBank(const MoeFp8BlockBank& bank) : DeviceExpertBank(SchemeKind::Fp8Block), bank_(bank) {}

  void gemm(StepContext& ctx, const ExpertInput& in, const MoeDispatch& d, const DeviceTensor& ys) const override {
    moe_grouped_gemm_fp8_block(bf16_rows(ctx, in), bank_, d, ys, ctx.stream);
  }

  std::vector<BankArray> arrays(int64_t experts) const override {
    return {bank_array(bank_.codes, bank_.code_bytes(), experts), bank_array(bank_.scales, bank_.scale_bytes(), experts)};
  }

  std::shared_ptr<const DeviceExpertBank> alloc_like(Arena& arena, int64_t, int64_t experts,
                                                     const char* what) const override {
    return std::make_shared<Fp8BlockExpertBank>(moe_fp8_block_alloc(arena, experts, bank_.n, bank_.k, what));
  }

 private:
  MoeFp8BlockBank bank_;
};

// 128×128 blocks over whole 128-row blocks of each expert (one layout: 0).
std::optional<int64_t> fp8_block_layout(const Binding& b, int64_t experts, int64_t n, int64_t k, PlanFiles&) {
  const SourcePart* scales = b.part("weight_scale");
  if (b.scheme.block_n != kFp8ExpertBlock || b.scheme.block_k != kFp8ExpertBlock || scales == nullptr ||
      static_cast<int64_t>(scales->tensors.size()) != experts) {
    return std::nullopt;
  }
  if (n % kFp8ExpertBlock != 0 || k % 8 != 0) return std::nullopt;
  return 0;
}

// Every expert's codes and multipliers copied as stored (moe_fp8_block.h).
std::shared_ptr<const DeviceExpertBank> upload_fp8_block(UploadContext& up, const ExpertBankSource& src, int64_t) {
  const int64_t n1 = src.n1, n2 = src.n2, E = src.experts, K = src.k;
  const MoeFp8BlockBank bank = moe_fp8_block_alloc(up.arena, E, n1 + n2, K, src.name.c_str());
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t p = 0; p < (n2 > 0 ? 2 : 1); ++p) {
      const int64_t rows = p == 0 ? n1 : n2;
      const Binding& b = up.plan.bindings[p == 0 ? src.i1 : src.i2];
      const SourceTensor& codes = b.source("weight", e);
      const SourceTensor& scales = b.source("weight_scale", e);
      const std::span<const uint8_t> code_bytes = up.files.bytes(codes);
      if (static_cast<int64_t>(code_bytes.size()) != rows * K) {
        throw Error(Where{up.files.path(codes), b.param, "shape"}, "expert " + std::to_string(e) + " holds " +
                    std::to_string(code_bytes.size()) + " codes, its rows need " + std::to_string(rows * K));
      }
      const std::vector<float> multipliers = decode_source(scales, up.files);
      if (static_cast<int64_t>(multipliers.size()) != rows / kFp8ExpertBlock * bank.scale_cols()) {
        throw Error(Where{up.files.path(scales), b.param, "weight_scale"},
                    "expert " + std::to_string(e) + " holds " + std::to_string(multipliers.size()) + " multipliers, its " +
                        std::to_string(rows) + "×" + std::to_string(K) + " codes need " +
                        std::to_string(rows / kFp8ExpertBlock * bank.scale_cols()));
      }
      moe_fp8_block_upload_rows(bank, e * (n1 + n2) + p * n1, code_bytes.data(), multipliers.data(), rows);
    }
  }
  up.bytes += bank.code_bytes() + bank.scale_bytes();
  return std::make_shared<Fp8BlockExpertBank>(bank);
}

}  // namespace

const CudaFormat cuda_format_fp8_tensor{tensor_linear};
const CudaFormat cuda_format_fp8_block{block_linear, false, fp8_block_layout, upload_fp8_block};

}  // namespace k3::cuda
