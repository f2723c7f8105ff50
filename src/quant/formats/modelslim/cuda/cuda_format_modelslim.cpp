// ModelSlim on the GPU (cuda_format.h): W4A8 routed-expert banks stay packed (with
// CudaOptions::packed_int_experts) for the W4A8 grouped GEMM, which takes int8 activations per row —
// the CPU's contract (moe_w4a8.h); the layout is the weight scale group (0: per channel). Dense W4A8
// linears run the same kernel as a bank of one expert (bank_linear.h); W8A8 is dequantised to bf16.
#include <span>

#include "backend/cuda/executor/cuda_format.h"
#include "backend/cuda/executor/step.h"
#include "core/error.h"
#include "quant/formats/modelslim/cuda/moe_w4a8.h"
#include "quant/formats/modelslim/modelslim.h"

namespace k3::cuda {
namespace {

class W4A8ExpertBank final : public DeviceExpertBank {
 public:
  explicit W4A8ExpertBank(const MoeW4A8Bank& bank) : DeviceExpertBank(SchemeKind::W4A8), bank_(bank) {}

  void gemm(StepContext& ctx, const ExpertInput& in, const MoeDispatch& d, const DeviceTensor& ys) const override {
    const int64_t R = d.rows(), K = in.rows.cols;
    const Int8Rows q{ctx.scratch(DType::kU8, R, K, "moe int8 rows"),
                     ctx.arena.alloc_n<float>(static_cast<size_t>(R), "moe int8 row scales")};
    if (in.act != nullptr) {
      moe_quantize_int8_activation(*in.act, in.gate, in.up, q, ctx.stream);
    } else {
      moe_quantize_int8_rows(in.rows, q, ctx.stream);
    }
    moe_grouped_gemm_w4a8(q, bank_, d, ys, ctx.stream);
  }

  std::vector<BankArray> arrays(int64_t experts) const override {
    return {bank_array(bank_.codes, bank_.code_bytes(), experts),
            bank_array(bank_.scales, bank_.scale_count() * sizeof(float), experts),
            {bank_.out_scale, static_cast<size_t>(bank_.parts) * sizeof(float)}};
  }

  std::shared_ptr<const DeviceExpertBank> alloc_like(Arena& arena, int64_t, int64_t experts,
                                                     const char* what) const override {
    return std::make_shared<W4A8ExpertBank>(
        moe_w4a8_alloc(arena, experts, bank_.n, bank_.k, bank_.group_size, bank_.parts, what));
  }

 private:
  MoeW4A8Bank bank_;
};

// One tensor per expert of int4 codes, N a multiple of 16, K of 64, and a scale group (expert 0's
// header) the kernels take: per channel, or a multiple of 64 dividing K.
std::optional<int64_t> w4a8_layout(const Binding& b, int64_t, int64_t n, int64_t k, PlanFiles& files) {
  if (n % 16 != 0 || k % 64 != 0) return std::nullopt;
  const ModelSlimWeight w = read_modelslim_weight(b, n, k, 0, files);
  const int64_t g = w.group_size;
  if (!w.int4 || (g != 0 && (g % 64 != 0 || k % g != 0))) return std::nullopt;
  return g;
}

// Codes and fp32 scale products repacked per expert and part; out_scale 1 (the activation scale and
// the weight scales are the whole contract, moe_w4a8.h).
std::shared_ptr<const DeviceExpertBank> upload_w4a8(UploadContext& up, const ExpertBankSource& src, int64_t group) {
  const int64_t n1 = src.n1, n2 = src.n2, E = src.experts, K = src.k;
  const int64_t parts = n2 > 0 ? 2 : 1;
  if (n2 > 0 && n1 != n2) throw Error(Where{"", src.name, "shape"}, "w1 and w3 differ in rows");
  const MoeW4A8Bank bank = moe_w4a8_alloc(up.arena, E, n1 + n2, K, group, parts, src.name.c_str());
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t rows = p == 0 ? n1 : n2;
      const Binding& b = up.plan.bindings[p == 0 ? src.i1 : src.i2];
      const ModelSlimWeight w = read_modelslim_weight(b, src.rows_in_source(rows), K, static_cast<size_t>(e), up.files);
      if (!w.int4 || w.group_size != group) {  // the bank takes one layout: expert 0's (choose_expert_packing)
        throw Error(w.where, "expert " + std::to_string(e) + " is not int4 with scale groups of " + std::to_string(group) +
                                 " like expert 0");
      }
      try {
        // From row row0 (even: packed codes hold row pairs): its codes, channel scales and group scales.
        const int64_t r0 = src.row0;
        moe_w4a8_upload_rows(bank, e * (n1 + n2) + p * n1,
                             reinterpret_cast<const int8_t*>(w.weight.data()) + (w.packed_along_n ? r0 / 2 : r0) * K,
                             w.packed_along_n, w.scale.data() + r0,
                             group > 0 ? w.scale_second.data() + r0 * (K / group) : w.scale_second.data(),
                             rows);
      } catch (const Error& err) {  // codes outside int4 in the unpacked layout: name where they are
        throw Error(w.where, "expert " + std::to_string(e) + ": " + err.detail());
      }
    }
  }
  const std::vector<float> ones(static_cast<size_t>(E * parts), 1.0f);
  moe_w4a8_upload_out_scale(bank, ones.data());
  up.bytes += bank.code_bytes() + bank.scale_count() * sizeof(float) + ones.size() * sizeof(float);
  return std::make_shared<W4A8ExpertBank>(bank);
}

}  // namespace

const CudaFormat cuda_format_w4a8{.needs_packed_int = true,
                                  .expert_layout = w4a8_layout,
                                  .upload_experts = upload_w4a8,
                                  .dense_as_bank = true,
                                  .dense_bank_by_default = true};
const CudaFormat cuda_format_w8a8{};

}  // namespace k3::cuda
