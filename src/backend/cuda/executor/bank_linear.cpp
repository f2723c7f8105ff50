#include "backend/cuda/executor/bank_linear.h"

#include <memory>

#include "backend/cuda/executor/step.h"
#include "backend/cuda/moe/moe.h"

namespace k3::cuda {
namespace {

constexpr int64_t kHeadShareRowGroup = 16;

class BankLinear final : public DeviceLinearForm {
 public:
  explicit BankLinear(std::shared_ptr<const DeviceExpertBank> bank) : bank_(std::move(bank)) {}

  void gemm(StepContext& ctx, const DeviceTensor& x, const DeviceTensor& y) const override {
    const int64_t T = x.rows;
    // The step's dispatch for T rows, or (a row count the step did not lay out) this linear's own.
    const MoeDispatch* d = ctx.one_expert.get(T, ctx.stream);
    MoeDispatch own;
    if (d == nullptr) {
      own = moe_dispatch_view(ctx.arena.alloc(moe_dispatch_bytes(T, 1, 1), "one-expert dispatch"), T, 1, 1);
      moe_one_expert_dispatch(own, ctx.stream);
      d = &own;
    }
    bank_->gemm(ctx, ExpertInput::of_rows(x), *d, y);
  }
  bool writes_f32() const override { return true; }  // every bank's GEMM writes bf16 or f32

 private:
  std::shared_ptr<const DeviceExpertBank> bank_;
};

}  // namespace

std::optional<int64_t> dense_bank_layout(const LoadPlan& plan, PlanFiles& files, size_t i, IndexRange rows,
                                         bool packed_int) {
  const Binding& b = plan.bindings[i];
  const ParamSpec& spec = plan.params[i];
  const CudaFormat& f = cuda_format(b.scheme.kind);
  if (!f.dense_as_bank || f.expert_layout == nullptr || f.upload_experts == nullptr) return std::nullopt;
  if (f.needs_packed_int && !packed_int) return std::nullopt;
  if (spec.shape.size() != 2 || !b.layout_only()) return std::nullopt;
  const int64_t n = static_cast<int64_t>(spec.shape[0]), k = static_cast<int64_t>(spec.shape[1]);
  if (rows.first < 0 || rows.count <= 0 || rows.end() > n) return std::nullopt;
  // A head share: from an even row (ModelSlim packs int4 codes in row pairs), whole 16-row groups (the
  // row group of every bank kernel); the layout is the stored parameter's.
  const bool share = rows.count != n;
  if (share && (rows.first % 2 != 0 || rows.count % kHeadShareRowGroup != 0)) return std::nullopt;
  return f.expert_layout(b, 1, n, k, files);
}

void upload_bank_linear(UploadContext& up, size_t i, const std::string& name, IndexRange rows, int64_t layout,
                        DeviceLinear& w) {
  const CudaFormat& f = cuda_format(up.plan.bindings[i].scheme.kind);
  ExpertBankSource src{name, i, i, rows.count, 0, 1, w.k};
  src.row0 = rows.first;
  src.source_rows = static_cast<int64_t>(up.plan.params[i].shape[0]);
  w.kind = DeviceLinear::Kind::kPacked;
  w.packed = std::make_shared<BankLinear>(f.upload_experts(up, src, layout));
}

}  // namespace k3::cuda
