#include "backend/cuda/executor/w4_expert_bank.h"

#include <cmath>
#include <span>

#include "backend/cuda/executor/step.h"
#include "core/error.h"

namespace k3::cuda {
namespace {

class W4ExpertBank final : public DeviceExpertBank {
 public:
  W4ExpertBank(SchemeKind scheme, const MoeW4Bank& bank, const float* input_scale, W4InputQuantizer quantize)
      : DeviceExpertBank(scheme), bank_(bank), input_scale_(input_scale), quantize_(quantize) {}

  void gemm(StepContext& ctx, const ExpertInput& in, const MoeDispatch& d, const DeviceTensor& ys) const override {
    // Step scratch for the decode kernel's split-K partial sums where the shapes call for them.
    const size_t ws_bytes = moe_w4_workspace_bytes(bank_, d);
    float* part = ws_bytes > 0 ? static_cast<float*>(ctx.arena.alloc(ws_bytes, "w4 split-K partial sums")) : nullptr;
    const W4Workspace ws{part, ws_bytes};
    moe_grouped_gemm_w4(input(ctx, in, d), bank_, d, ys, ctx.stream, ws);
  }

  std::vector<BankArray> arrays(int64_t experts) const override {
    std::vector<BankArray> a = {bank_array(bank_.codes, bank_.code_bytes(), experts),
                                bank_array(bank_.scales, bank_.scale_bytes(), experts),
                                {bank_.out_scale, static_cast<size_t>(bank_.parts) * sizeof(float)}};
    if (input_scale_ != nullptr) a.push_back({const_cast<float*>(input_scale_), sizeof(float)});  // W4A4
    return a;
  }

  std::shared_ptr<const DeviceExpertBank> alloc_like(Arena& arena, int64_t, int64_t experts,
                                                     const char* what) const override {
    const MoeW4Bank b = moe_w4_alloc(arena, bank_.format, experts, bank_.n, bank_.k, bank_.parts, what);
    const float* in = input_scale_ != nullptr ? arena.alloc_n<float>(static_cast<size_t>(experts), what) : nullptr;
    return std::make_shared<W4ExpertBank>(scheme(), b, in, quantize_);
  }

 private:
  // The GEMM input: bf16 rows, or under W4A4 the checkpoint's activation values of them in step scratch.
  DeviceTensor input(StepContext& ctx, const ExpertInput& in, const MoeDispatch& d) const {
    if (input_scale_ == nullptr) return bf16_rows(ctx, in);
    const DeviceTensor out = ctx.scratch(DType::kBF16, in.rows.rows, in.rows.cols, "moe w4a4 activations");
    quantize_(in, input_scale_, d, out, ctx.stream);
    return out;
  }

  MoeW4Bank bank_;
  const float* input_scale_ = nullptr;  // W4A4: each expert's static activation scale [E]; out_scale carries it
  W4InputQuantizer quantize_ = nullptr;
};

}  // namespace

std::optional<int64_t> w4_expert_layout(const Binding&, int64_t, int64_t n, int64_t k, PlanFiles&) {
  if (n % 16 != 0 || k % 64 != 0) return std::nullopt;
  return 0;
}

std::shared_ptr<const DeviceExpertBank> upload_w4_experts(UploadContext& up, const ExpertBankSource& src,
                                                          SchemeKind scheme, const W4Upload& how) {
  const std::string& name = src.name;
  const int64_t n1 = src.n1, n2 = src.n2, E = src.experts, K = src.k;
  const W4Format f = how.format;
  const int64_t parts = n2 > 0 ? 2 : 1;
  const bool w4a4 = up.w4a4 && how.quantize != nullptr;
  std::vector<float> in_scale(w4a4 ? static_cast<size_t>(E) : 0);
  if (n2 > 0 && n1 != n2) throw Error(Where{"", name, "shape"}, "w1 and w3 differ in rows");
  const MoeW4Bank bank = moe_w4_alloc(up.arena, f, E, n1 + n2, K, parts, name.c_str());
  std::vector<float> out_scale(static_cast<size_t>(E * parts), 1.0f);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t p = 0; p < parts; ++p) {
      const Binding& b = up.plan.bindings[p == 0 ? src.i1 : src.i2];
      const int64_t rows = p == 0 ? n1 : n2;
      const SourceTensor& code_src = b.source("weight", e);
      const SourceTensor& scale_src = b.source("weight_scale", e);
      const std::span<const uint8_t> codes = up.files.bytes(code_src), scales = up.files.bytes(scale_src);
      const int64_t held = src.rows_in_source(rows);
      const int64_t want_codes = held * K / 2, want_scales = held * K / w4_group(f);
      if (static_cast<int64_t>(codes.size()) != want_codes || static_cast<int64_t>(scales.size()) != want_scales) {
        throw Error(Where{up.files.path(code_src), b.param, "weight"},
                    "expert " + std::to_string(e) + " holds " + std::to_string(codes.size()) + " code and " +
                        std::to_string(scales.size()) + " scale bytes, " + std::to_string(held) + "×" +
                        std::to_string(K) + " needs " + std::to_string(want_codes) + " and " +
                        std::to_string(want_scales));
      }
      try {
        moe_w4_upload_rows(bank, e * (n1 + n2) + p * n1, codes.data() + src.row0 * K / 2,
                           scales.data() + src.row0 * K / w4_group(f), rows);
      } catch (const Error& err) {  // a scale the kernels cannot represent: name where it is
        throw Error(Where{up.files.path(scale_src), b.param, "weight_scale"},
                    "expert " + std::to_string(e) + ": " + err.detail());
      }
      if (how.tensor_scale) {
        out_scale[static_cast<size_t>(e * parts + p)] = scalar_source(b, "weight_scale_2", e, up.files);
      }
      if (w4a4) {
        const float s = scalar_source(b, "input_scale", e, up.files);
        if (!(s > 0.0f) || !std::isfinite(s)) {
          throw Error(Where{up.files.path(b.source("input_scale", e)), b.param, "input_scale"},
                      "expert " + std::to_string(e) + ": W4A4 needs a positive finite input_scale, got " + std::to_string(s));
        }
        if (p == 1 && s != in_scale[static_cast<size_t>(e)]) {
          throw Error(Where{up.files.path(b.source("input_scale", e)), b.param, "input_scale"},
                      "expert " + std::to_string(e) + ": W4A4 on the GPU quantises the shared input of w1 and w3 once, but their input_scale differ (" +
                          std::to_string(in_scale[static_cast<size_t>(e)]) + " vs " + std::to_string(s) + ")");
        }
        in_scale[static_cast<size_t>(e)] = s;
        out_scale[static_cast<size_t>(e * parts + p)] *= s;
      }
    }
  }
  moe_w4_upload_out_scale(bank, out_scale.data());
  up.bytes += bank.code_bytes() + bank.scale_bytes() + out_scale.size() * sizeof(float);
  const float* input_scale = w4a4 ? up.upload(in_scale, name + " input_scale") : nullptr;
  return std::make_shared<W4ExpertBank>(scheme, bank, input_scale, how.quantize);
}

}  // namespace k3::cuda
