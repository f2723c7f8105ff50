// The CPU Backend: the block operations of ops.h behind the Backend interface.
#include <cstring>

#include "backend/cpu/ops.h"
#include "backend/cpu/tensor_parallel.h"

namespace k3 {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(int64_t vocab, ParallelRanks ranks) : vocab_(vocab), ranks_(ranks) {}

  void embed(const Floats& table, std::span<const int64_t> ids, Tensor& out) override {
    if (ranks_.tensor) return cpu::embed_vocab_split(*ranks_.tensor, table, vocab_, ids, out);
    const int64_t hidden = out.cols;
    for (size_t t = 0; t < ids.size(); ++t) {
      std::memcpy(out.row(static_cast<int64_t>(t)), table.data() + ids[t] * hidden, sizeof(float) * hidden);
    }
  }
  void linear(const cpu::CpuLinear& w, const Tensor& x, Tensor& y) override { cpu::linear(w, x, y); }
  void add(Tensor& acc, const Tensor& x) override { cpu::add(acc, x); }
  void rms_norm(const Tensor& x, const Floats& w, double eps, Tensor& y) override { cpu::rms_norm(x, w, eps, y); }
  void attn_res_mix_norm(std::span<const Tensor* const> candidates, const Floats& c, const Floats& norm_w, double eps,
                         Tensor& y) override {
    cpu::attn_res_mix_norm(candidates, c, norm_w, eps, y);
  }
  void kda(const K3Config& config, int64_t layer, const KdaWeights& w, const Tensor& x, std::span<const SeqSlice> slices,
           Tensor& out) override {
    cpu::kda_mixer(config, layer, w, x, slices, out);
  }
  void mla(const K3Config& config, int64_t layer, const MlaWeights& w, const Tensor& x, std::span<const SeqSlice> slices,
           Tensor& out) override {
    cpu::mla_mixer(config, layer, w, x, slices, out);
  }
  void moe(const K3Config& config, int64_t layer, const MoeWeights& w, const Tensor& x, Tensor& out) override {
    cpu::moe(config, layer, w, x, out, ranks_);
  }
  void mlp(const K3Config& config, const MlpWeights& w, const Tensor& x, Tensor& out) override { cpu::mlp(config, w, x, out); }

 private:
  int64_t vocab_;
  ParallelRanks ranks_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const K3Config& config, ParallelRanks ranks) {
  return std::make_unique<CpuBackend>(config.vocab_size, ranks);
}

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(0, ParallelRanks{}); }

}  // namespace k3
