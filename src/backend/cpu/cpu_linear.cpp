#include "backend/cpu/cpu_linear.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/cpu_format.h"
#include "backend/cpu/kernels/float_matrix.h"
#include "backend/cpu/kernels/tile_gemm.h"
#include "backend/cpu/kernels/weight_matrix.h"
#include "core/error.h"
#include "core/numeric.h"

namespace k3::cpu {
namespace {

thread_local LinearPath t_linear_path = LinearPath::kByTokens;

}  // namespace

ScopedLinearPath::ScopedLinearPath(LinearPath path) : previous_(t_linear_path) { t_linear_path = path; }
ScopedLinearPath::~ScopedLinearPath() { t_linear_path = previous_; }
LinearPath current_linear_path() { return t_linear_path; }

namespace {

// Rows per work item: small enough that every thread gets several, a multiple of 16 so SIMD row
// groups stay whole.
int64_t row_chunk(int64_t rows) {
  const int64_t threads = omp_get_max_threads();
  const int64_t per = (rows + threads * 4 - 1) / (threads * 4);
  return std::max<int64_t>(16, (per + 15) / 16 * 16);
}

// Weight bytes of one work item when the fused kernels take more tokens than one pass holds: they
// pass over the item's rows once per kFusedMaxTokens tokens, so the item must stay in the core's L2
// (1–2 MiB on current x86 server cores) next to the activations streaming through.
constexpr uint64_t kFusedItemBytes = 128u << 10;

int64_t fused_row_chunk(const WeightMatrix& w, int64_t m) {
  const int64_t chunk = row_chunk(w.rows());
  if (m <= kFusedMaxTokens || w.rows() == 0) return chunk;
  const uint64_t row_bytes = std::max<uint64_t>(1, w.weight_bytes() / static_cast<uint64_t>(w.rows()));
  const int64_t cached = static_cast<int64_t>(kFusedItemBytes / row_bytes) / 16 * 16;
  return std::min(chunk, std::max<int64_t>(16, cached));
}

// Rows [first, first + count) of a matrix shared with others: every call forwards to the whole
// matrix with the rows shifted.
class RowSliceMatrix final : public WeightMatrix {
 public:
  RowSliceMatrix(std::shared_ptr<const WeightMatrix> whole, int64_t first, int64_t count)
      : WeightMatrix(count, whole->cols(), whole->isa()), whole_(std::move(whole)), first_(first) {}
  void prepare(const float* x, int64_t m, PreparedActivations& a) const override { whole_->prepare(x, m, a); }
  void dot_rows(const PreparedActivations& a, int64_t r0, int64_t r1, float* y, int64_t ldy) const override {
    // The whole matrix writes y[t·ldy + r] for its absolute rows r: hand it y shifted back by first_
    // (an address computed as an integer, only ever dereferenced inside y).
    float* shifted = reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(y) - static_cast<uintptr_t>(first_) * sizeof(float));
    whole_->dot_rows(a, first_ + r0, first_ + r1, shifted, ldy);
  }
  void decode_rows(int64_t r0, int64_t r1, float* out) const override { whole_->decode_rows(first_ + r0, first_ + r1, out); }
  float output_scale() const override { return whole_->output_scale(); }
  uint64_t weight_bytes() const override {
    return whole_->rows() == 0 ? 0 : whole_->weight_bytes() / static_cast<uint64_t>(whole_->rows()) * static_cast<uint64_t>(rows());
  }
  std::string kernel_name() const override { return whole_->kernel_name(); }

 private:
  std::shared_ptr<const WeightMatrix> whole_;
  int64_t first_;
};

class KernelLinear final : public CpuLinear {
 public:
  explicit KernelLinear(std::shared_ptr<const WeightMatrix> w) : CpuLinear(w->rows(), w->cols()), w_(std::move(w)) {}

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
    const int64_t n = rows(), k = cols();
    const LinearPath path = current_linear_path();
    // Integer activations (fixed point, int8) take the fused kernels for any number of tokens: their
    // integer dot products do two to four multiply-adds per lane and instruction where the decoded
    // tiles' float32 FMAs do one, and their rows are never decoded. Float activations (BF16, FP8,
    // F32 weights) decode tiles of rows once when more tokens come than one fused pass takes.
    const bool fused = path == LinearPath::kFused || a.form != ActivationForm::F32 ||
                       (path == LinearPath::kByTokens && m <= kFusedMaxTokens);
    if (fused) {
      const int64_t chunk = fused_row_chunk(*w_, m), chunks = (n + chunk - 1) / chunk;
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
  std::unique_ptr<CpuLinear> rows_view(int64_t first, int64_t count) const override {
    auto view = std::make_unique<KernelLinear>(std::make_shared<RowSliceMatrix>(w_, first, count));
    view->set_origin(scheme(), bytes_location());
    return view;
  }

 private:
  std::shared_ptr<const WeightMatrix> w_;
};

}  // namespace

std::unique_ptr<CpuLinear> make_kernel_linear(std::unique_ptr<WeightMatrix> matrix) {
  return std::make_unique<KernelLinear>(std::move(matrix));
}

std::unique_ptr<CpuLinear> make_f32_linear(std::vector<float> weight, int64_t rows, int64_t cols) {
  return make_kernel_linear(make_f32_matrix(std::move(weight), rows, cols, selected_isa()));
}

namespace {

std::unique_ptr<CpuLinear> make_unwrapped_linear(const Binding& binding, const ParamSpec& spec, PlanFiles& files,
                                                 int64_t expert, const LinearOptions& options) {
  const int64_t rows = static_cast<int64_t>(spec.shape[spec.shape.size() - 2]);
  const int64_t cols = static_cast<int64_t>(spec.shape.back());
  std::unique_ptr<CpuLinear> linear;
  WeightBytes bytes = WeightBytes::kHostCopy;
  // The scheme's fast form (layout-only bindings), else the dequantised float32 fallback.
  const CpuFormat& format = cpu_format(binding.scheme.kind);
  std::unique_ptr<WeightMatrix> fast;
  if (binding.layout_only() && format.make_matrix != nullptr) {
    fast = format.make_matrix(binding, rows, cols, files, expert, options, selected_isa());
  }
  if (fast != nullptr) {
    linear = make_kernel_linear(std::move(fast));
    bytes = format.reads_in_place ? WeightBytes::kMappedView : WeightBytes::kHostCopy;
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
  std::unique_ptr<CpuLinear> rows_view(int64_t first, int64_t count) const override {
    auto view = std::make_unique<Bf16InputLinear>(inner_->rows_view(first, count));
    view->set_origin(scheme(), bytes_location());
    return view;
  }
  const CpuLinear& inner() const { return *inner_; }

 private:
  std::vector<float> rounded(const float* x, int64_t m) const {
    std::vector<float> r(static_cast<size_t>(m * cols()));
    for (size_t i = 0; i < r.size(); ++i) r[i] = decode_bf16(encode_bf16(x[i]));
    return r;
  }
  std::unique_ptr<CpuLinear> inner_;
};

// LinearOptions::observer: reports the input, then runs the wrapped linear as usual.
class ObservedLinear final : public CpuLinear {
 public:
  ObservedLinear(std::unique_ptr<CpuLinear> inner, std::shared_ptr<LinearInputObserver> observer, std::string param, int64_t expert)
      : CpuLinear(inner->rows(), inner->cols()),
        inner_(std::move(inner)),
        observer_(std::move(observer)),
        param_(std::move(param)),
        expert_(expert) {
    set_origin(inner_->scheme(), inner_->bytes_location());
  }
  void forward(const float* x, int64_t m, float* y) const override {
    observer_->observe(param_, expert_, x, m, cols());
    inner_->forward(x, m, y);
  }
  void forward_accumulators(const float* x, int64_t m, float* y) const override {
    observer_->observe(param_, expert_, x, m, cols());
    inner_->forward_accumulators(x, m, y);
  }
  float output_scale() const override { return inner_->output_scale(); }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
  std::string kernel_name() const override { return inner_->kernel_name(); }
  std::unique_ptr<CpuLinear> rows_view(int64_t first, int64_t count) const override {
    return std::make_unique<ObservedLinear>(inner_->rows_view(first, count), observer_, param_, expert_);
  }

 private:
  std::unique_ptr<CpuLinear> inner_;
  std::shared_ptr<LinearInputObserver> observer_;
  std::string param_;
  int64_t expert_;
};

}  // namespace

std::unique_ptr<CpuLinear> make_cpu_linear(const Binding& binding, const ParamSpec& spec, PlanFiles& files, int64_t expert,
                                           const LinearOptions& options) {
  std::unique_ptr<CpuLinear> linear = make_unwrapped_linear(binding, spec, files, expert, options);
  if (options.activation == ActivationNumerics::Bf16Inputs) {
    auto wrapped = std::make_unique<Bf16InputLinear>(std::move(linear));
    wrapped->set_origin(wrapped->inner().scheme(), wrapped->inner().bytes_location());
    linear = std::move(wrapped);
  }
  if (options.observer) linear = std::make_unique<ObservedLinear>(std::move(linear), options.observer, spec.name, expert);
  return linear;
}

}  // namespace k3::cpu
