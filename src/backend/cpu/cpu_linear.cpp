#include "backend/cpu/cpu_linear.h"

#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/kernels/formats.h"
#include "quant/formats/modelslim/cpu/modelslim_matrix.h"
#include "backend/cpu/kernels/tile_gemm.h"
#include "backend/cpu/kernels/weight_matrix.h"
#include "core/error.h"
#include "core/numeric.h"
#include "quant/formats/ggml/ggml_dequant.h"

namespace k3::cpu {
namespace {

// Rows per work item: small enough that every thread gets several, a multiple of 16 so SIMD row
// groups stay whole.
int64_t row_chunk(int64_t rows) {
  const int64_t threads = omp_get_max_threads();
  const int64_t per = (rows + threads * 4 - 1) / (threads * 4);
  return std::max<int64_t>(16, (per + 15) / 16 * 16);
}

class KernelLinear final : public CpuLinear {
 public:
  explicit KernelLinear(std::unique_ptr<WeightMatrix> w) : CpuLinear(w->rows(), w->cols()), w_(std::move(w)) {}

  void forward(const float* x, int64_t m, float* y) const override {
    forward_accumulators(x, m, y);
    const float alpha = w_->output_scale();
    if (alpha == 1.0f) return;
    for (int64_t i = 0; i < m * rows(); ++i) y[i] *= alpha;
  }
  float output_scale() const override { return w_->output_scale(); }

  void forward_accumulators(const float* x, int64_t m, float* y) const override {
    if (m <= 0) return;
    PreparedActivations a;
    w_->prepare(x, m, a);
    const int64_t n = rows(), k = cols(), chunk = row_chunk(n), chunks = (n + chunk - 1) / chunk;
    if (m <= kFusedMaxTokens) {
      // One chunk (router, small projections): no fork/join.
#pragma omp parallel for schedule(static) if (chunks > 1)
      for (int64_t c = 0; c < chunks; ++c) w_->dot_rows(a, c * chunk, std::min(n, (c + 1) * chunk), y, n);
      return;
    }
    std::vector<float> values(static_cast<size_t>(m * k));
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < m; ++t) a.values(t, values.data() + t * k);
    constexpr int64_t kTileRows = 16;
    const int64_t tiles = (n + kTileRows - 1) / kTileRows;
#pragma omp parallel if (tiles > 1)
    {
      std::vector<float> tile(static_cast<size_t>(kTileRows * k));
#pragma omp for schedule(static)
      for (int64_t i = 0; i < tiles; ++i) {
        const int64_t r0 = i * kTileRows, r1 = std::min(n, r0 + kTileRows);
        w_->decode_rows(r0, r1, tile.data());
        gemm_rows_f32(w_->isa(), tile.data(), r1 - r0, values.data(), m, k, y + r0, n);
      }
    }
  }
  uint64_t weight_bytes() const override { return w_->weight_bytes(); }
  std::string kernel_name() const override { return w_->kernel_name(); }

 private:
  std::unique_ptr<WeightMatrix> w_;
};

}  // namespace

std::unique_ptr<CpuLinear> make_kernel_linear(std::unique_ptr<WeightMatrix> matrix) {
  return std::make_unique<KernelLinear>(std::move(matrix));
}

std::unique_ptr<CpuLinear> make_f32_linear(std::vector<float> weight, int64_t rows, int64_t cols) {
  return make_kernel_linear(make_f32_matrix(std::move(weight), rows, cols, selected_isa()));
}

namespace {

// The scheme's fast CPU form, or nullptr where only the dequantised float32 fallback exists.
std::unique_ptr<WeightMatrix> fast_matrix(const Binding& b, int64_t rows, int64_t cols, PlanFiles& files, int64_t expert,
                                          const LinearOptions& options, CpuIsa isa) {
  if (!b.layout_only()) return nullptr;
  switch (b.scheme.kind) {
    case SchemeKind::Dense: {
      const SourceTensor& w = b.source("weight", expert);
      if (w.dtype != "BF16" && w.dtype != "F16") return nullptr;
      return make_half_matrix(files.bytes(w), w.dtype == "BF16", rows, cols, files.file(w), isa);
    }
    case SchemeKind::Fp8Tensor:
    case SchemeKind::Fp8Block: {
      const SourceTensor& w = b.source("weight", expert);
      const bool block = b.scheme.kind == SchemeKind::Fp8Block;
      // The checkpoint's activation contract: dynamic 1×128 for block FP8, the static input_scale for
      // per-tensor FP8 (float activations where a per-tensor checkpoint has none).
      Fp8Options fp8;
      if (options.activation == ActivationNumerics::CheckpointContract) {
        fp8.a8 = block || b.part("input_scale") != nullptr;
        if (!block && fp8.a8) fp8.input_scale = scalar_source(b, "input_scale", expert, files);
      }
      return make_fp8_matrix(files.bytes(w), decode_source(b.source("weight_scale", expert), files),
                             block ? b.scheme.block_n : rows, block ? b.scheme.block_k : cols, rows, cols, files.file(w),
                             isa, fp8);
    }
    case SchemeKind::Nvfp4:
    case SchemeKind::Mxfp4: {
      const bool nvfp4 = b.scheme.kind == SchemeKind::Nvfp4;
      Fp4Options fp4;
      if (nvfp4 && options.activation == ActivationNumerics::CheckpointContract) {
        fp4.w4a4 = true;
        fp4.input_scale = scalar_source(b, "input_scale", expert, files);
      }
      const float global = nvfp4 ? scalar_source(b, "weight_scale_2", expert, files) : 1.0f;
      return make_fp4_matrix(files.bytes(b.source("weight", expert)), files.bytes(b.source("weight_scale", expert)),
                             nvfp4, global, rows, cols, isa, fp4);
    }
    case SchemeKind::W4A8:
    case SchemeKind::W8A8:
      return make_modelslim_matrix(b, rows, cols, files, expert, isa);
    case SchemeKind::Ggml: {
      const SourceTensor& w = b.source("weight", expert);
      const GgmlTypeInfo* info = find_ggml_type(b.scheme.storage);
      if (info == nullptr || !ggml_has_dequant(info->type)) return nullptr;
      if (info->type == GgmlType::F32) return nullptr;  // copied as float32 below
      if (info->type == GgmlType::F16 || info->type == GgmlType::BF16) {
        return make_half_matrix(files.bytes(w), info->type == GgmlType::BF16, rows, cols, files.file(w), isa);
      }
      return make_ggml_matrix(info->type, files.bytes(w), rows, cols, files.file(w), isa);
    }
    case SchemeKind::GgmlSplitKvB:
      return nullptr;
  }
  return nullptr;
}

}  // namespace

namespace {

// Whether fast_matrix's form of the scheme reads the checkpoint bytes in place (the formats that
// take a KeepAlive: half, FP8, GGML blocks) rather than repacking them.
bool reads_in_place(SchemeKind kind) {
  switch (kind) {
    case SchemeKind::Dense:
    case SchemeKind::Fp8Tensor:
    case SchemeKind::Fp8Block:
    case SchemeKind::Ggml:
      return true;
    default:
      return false;
  }
}

std::unique_ptr<CpuLinear> make_unwrapped_linear(const Binding& binding, const ParamSpec& spec, PlanFiles& files,
                                                 int64_t expert, const LinearOptions& options) {
  const int64_t rows = static_cast<int64_t>(spec.shape[spec.shape.size() - 2]);
  const int64_t cols = static_cast<int64_t>(spec.shape.back());
  std::unique_ptr<CpuLinear> linear;
  WeightBytes bytes = WeightBytes::kHostCopy;
  if (auto fast = fast_matrix(binding, rows, cols, files, expert, options, selected_isa())) {
    linear = make_kernel_linear(std::move(fast));
    bytes = reads_in_place(binding.scheme.kind) ? WeightBytes::kMappedView : WeightBytes::kHostCopy;
  } else if (expert < 0) {
    linear = make_f32_linear(materialize(binding, spec, files), rows, cols);
  } else {
    linear = make_f32_linear(materialize_expert(binding, spec, files, expert), rows, cols);
  }
  linear->set_origin(binding.scheme.kind, bytes);
  return linear;
}

// ActivationNumerics::Bf16Inputs: the input rounded to bf16, then the wrapped linear as usual.
class Bf16InputLinear final : public CpuLinear {
 public:
  explicit Bf16InputLinear(std::unique_ptr<CpuLinear> inner)
      : CpuLinear(inner->rows(), inner->cols()), inner_(std::move(inner)) {}
  void forward(const float* x, int64_t m, float* y) const override { inner_->forward(rounded(x, m).data(), m, y); }
  void forward_accumulators(const float* x, int64_t m, float* y) const override {
    inner_->forward_accumulators(rounded(x, m).data(), m, y);
  }
  float output_scale() const override { return inner_->output_scale(); }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
  std::string kernel_name() const override { return inner_->kernel_name() + "+bf16-inputs"; }
  const CpuLinear& inner() const { return *inner_; }

 private:
  std::vector<float> rounded(const float* x, int64_t m) const {
    std::vector<float> r(static_cast<size_t>(m * cols()));
    for (size_t i = 0; i < r.size(); ++i) r[i] = decode_bf16(encode_bf16(x[i]));
    return r;
  }
  std::unique_ptr<CpuLinear> inner_;
};

}  // namespace

std::unique_ptr<CpuLinear> make_cpu_linear(const Binding& binding, const ParamSpec& spec, PlanFiles& files, int64_t expert,
                                           const LinearOptions& options) {
  auto linear = make_unwrapped_linear(binding, spec, files, expert, options);
  if (options.activation != ActivationNumerics::Bf16Inputs) return linear;
  auto wrapped = std::make_unique<Bf16InputLinear>(std::move(linear));
  wrapped->set_origin(wrapped->inner().scheme(), wrapped->inner().bytes_location());
  return wrapped;
}

}  // namespace k3::cpu
