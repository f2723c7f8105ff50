// GGUF on the GPU (cuda_format.h): routed-expert banks of one GGML block type stay packed as stored
// (with CudaOptions::packed_int_experts; the layout is the GgmlType) for the GGUF grouped GEMV —
// 8-bit block activations, the CPU's contract — or, where moe_ggml_prefill_gemm says so, the prefill
// GEMM over bf16 rows (moe_ggml.h). Dense GGUF linears run the same kernels as a bank of one expert
// (bank_linear.h) where their block type has them, and from kGgmlDenseGemmRows rows cuBLASLt over the
// weight dequantised to bf16 chunk by chunk (moe_ggml_dense_gemm: the prefill GEMM's contract); a split kv_b
// (ExpertPack: k_b Q4_0, v_b Q2_K) keeps its blocks for the absorbed MLA decode (mla_absorb_ggml.h).
#include <span>

#include "backend/cuda/executor/cuda_format.h"
#include "backend/cuda/executor/step.h"
#include "core/error.h"
#include "io/ggml_types.h"
#include "quant/formats/ggml/cuda/mla_absorb_ggml.h"
#include "quant/formats/ggml/cuda/moe_ggml.h"

namespace k3::cuda {
namespace {

// SharedInputForms key of the 8-bit activation blocks of a block size (added to it).
constexpr int64_t kGgmlActsForm = int64_t{1} << 32;

class GgmlExpertBank final : public DeviceExpertBank {
 public:
  explicit GgmlExpertBank(const MoeGgmlBank& bank) : DeviceExpertBank(SchemeKind::Ggml), bank_(bank) {}

  void gemm(StepContext& ctx, const ExpertInput& in, const MoeDispatch& d, const DeviceTensor& ys) const override {
    const int64_t R = d.rows(), K = in.rows.cols;
    if (moe_ggml_dense_gemm_for(bank_, d)) {
      moe_ggml_dense_gemm(ctx.blas, ctx.arena, bf16_rows(ctx, in), bank_, ys, ctx.stream);
      ++ctx.packed_prefill_gemms;
      return;
    }
    if (moe_ggml_prefill_gemm(bank_, d)) {
      moe_grouped_gemm_ggml(bf16_rows(ctx, in), bank_, d, ys, ctx.stream);
      ++ctx.packed_prefill_gemms;
      return;
    }
    const size_t bytes = moe_ggml_acts_bytes(bank_.type, R, K);
    MoeGgmlActs acts;
    if (in.act != nullptr) {
      acts = moe_ggml_acts_view(ctx.arena.alloc(bytes, "moe ggml activations"), bank_.type, R, K);
      moe_ggml_quantize_activation(*in.act, in.gate, in.up, acts, ctx.stream);
    } else {
      // The rows' 8-bit blocks depend on the block size alone: every linear of the block over the same
      // input and block size reads one quantisation of it.
      const int64_t block = ggml_type_info(bank_.type).block_size;
      const SharedInputForms::Form form =
          ctx.input_forms.get(ctx.arena, in.rows, kGgmlActsForm + block, bytes, "moe ggml activations");
      acts = moe_ggml_acts_view(form.data, bank_.type, R, K);
      if (!form.ready) moe_ggml_quantize(in.rows, acts, ctx.stream);
    }
    moe_grouped_gemv_ggml(acts, bank_, d, ys, ctx.stream);
  }

  std::vector<BankArray> arrays(int64_t experts) const override {
    return {bank_array(bank_.data, bank_.bytes(), experts)};
  }

  std::shared_ptr<const DeviceExpertBank> alloc_like(Arena& arena, int64_t, int64_t experts,
                                                     const char* what) const override {
    return std::make_shared<GgmlExpertBank>(moe_ggml_alloc(arena, bank_.type, experts, bank_.n, bank_.k, what));
  }

 private:
  MoeGgmlBank bank_;
};

// A block type with GPU kernels, K a multiple of its block.
std::optional<int64_t> ggml_layout(const Binding& b, int64_t, int64_t, int64_t k, PlanFiles&) {
  const GgmlTypeInfo* info = find_ggml_type(b.scheme.storage);
  if (info == nullptr || !moe_ggml_supported(info->type) || k % info->block_size != 0) return std::nullopt;
  return static_cast<int64_t>(info->type);
}

// Every expert's rows copied as stored (moe_ggml.h).
std::shared_ptr<const DeviceExpertBank> upload_ggml(UploadContext& up, const ExpertBankSource& src, int64_t type) {
  const int64_t n1 = src.n1, n2 = src.n2, E = src.experts;
  const MoeGgmlBank bank = moe_ggml_alloc(up.arena, static_cast<GgmlType>(type), E, n1 + n2, src.k, src.name.c_str());
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t p = 0; p < (n2 > 0 ? 2 : 1); ++p) {
      const int64_t rows = p == 0 ? n1 : n2;
      const SourceTensor& s = up.plan.bindings[p == 0 ? src.i1 : src.i2].source("weight", e);
      const std::span<const uint8_t> bytes = up.files.bytes(s);
      const int64_t want = src.rows_in_source(rows) * static_cast<int64_t>(bank.row_bytes());
      if (static_cast<int64_t>(bytes.size()) != want) {
        throw Error(Where{up.files.path(s), src.name, "shape"}, "expert " + std::to_string(e) + " holds " +
                    std::to_string(bytes.size()) + " bytes, its rows need " + std::to_string(want));
      }
      moe_ggml_upload_rows(bank, e * (n1 + n2) + p * n1, bytes.data() + src.row0 * bank.row_bytes(), rows);
    }
  }
  up.bytes += bank.bytes();
  return std::make_shared<GgmlExpertBank>(bank);
}

// A split kv_b's k_b [H, r, d_nope] and v_b [H, d_v, r], each a bank with one "expert" per head.
class SplitKvB final : public DeviceAbsorbedKvB {
 public:
  SplitKvB(const MoeGgmlBank& k_b, const MoeGgmlBank& v_b) : k_b_(k_b), v_b_(v_b) {}
  void absorb_q(const DeviceTensor& q, const DeviceTensor& q_abs, cudaStream_t stream) const override {
    mla_absorb_q_ggml(q, k_b_, q_abs, stream);
  }
  void unabsorb_o(const DeviceTensor& o_lat, const DeviceTensor& gate, const DeviceTensor& out,
                  cudaStream_t stream) const override {
    mla_unabsorb_o_ggml(o_lat, v_b_, gate, out, stream);
  }

 private:
  MoeGgmlBank k_b_, v_b_;
};

// One part of a split kv_b, [heads, n, k] GGML blocks as stored, into a bank with one "expert" per head.
MoeGgmlBank split_bank(UploadContext& up, const Binding& b, const char* role, int64_t heads, int64_t n, int64_t k,
                       const std::string& what) {
  const SourceTensor& src = b.source(role);
  const GgmlTypeInfo* info = find_ggml_type(src.dtype);
  if (info == nullptr || !moe_ggml_supported(info->type)) {
    throw Error(Where{up.files.path(src), b.param, role}, "GGML type '" + src.dtype + "' has no GPU kernel");
  }
  const MoeGgmlBank bank = moe_ggml_alloc(up.arena, info->type, heads, n, k, what.c_str());
  const std::span<const uint8_t> bytes = up.files.bytes(src);
  if (bytes.size() != bank.bytes()) {
    throw Error(Where{up.files.path(src), b.param, role}, "holds " + std::to_string(bytes.size()) + " bytes, " +
                                                            std::to_string(heads) + "×" + std::to_string(n) + "×" +
                                                            std::to_string(k) + " needs " + std::to_string(bank.bytes()));
  }
  moe_ggml_upload_rows(bank, 0, bytes.data(), heads * n);
  up.bytes += bank.bytes();
  return bank;
}

std::shared_ptr<const DeviceAbsorbedKvB> split_kv_b(UploadContext& up, size_t i, const std::string& name,
                                                    const MlaConfig& m) {
  const Binding& b = up.plan.bindings[i];
  const int64_t nh = m.num_heads;
  const MoeGgmlBank k_b = split_bank(up, b, "k_b", nh, m.kv_lora_rank, m.qk_nope_head_dim, name + " k_b");
  const MoeGgmlBank v_b = split_bank(up, b, "v_b", nh, m.v_head_dim, m.kv_lora_rank, name + " v_b");
  return std::make_shared<SplitKvB>(k_b, v_b);
}

}  // namespace

const CudaFormat cuda_format_ggml{
    .needs_packed_int = true, .expert_layout = ggml_layout, .upload_experts = upload_ggml, .dense_as_bank = true};
const CudaFormat cuda_format_ggml_split_kv_b{.absorbed_kv_b = split_kv_b};

}  // namespace k3::cuda
